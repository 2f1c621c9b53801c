//! An intent as the browser keeps it (SPEC §7; imports keep theirs by the same rules, §10): one key per intent, stored with the exact
//! request before the first send, the operation id added once known, and whether the operation
//! has settled. Every write is conditional: only the current drive of a tab, and only while the
//! stored intent is still the one it drives (same key), may change or remove it, so a drive that
//! another drive or another tab superseded while it awaited cannot overwrite a newer intent.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::cell::Cell;

/// One intent: an export's or an import's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Intent {
    /// The idempotency key, a random v4 UUID from `crypto.getRandomValues` made when the user asked.
    pub key: String,
    /// The request as the JSON text sent on every try, byte for byte. The page never reads it
    /// back into a typed request, so the wasm carries no decoder of one.
    pub request: Box<RawValue>,
    /// The operation's id, once the server has told it.
    #[serde(default)]
    pub id: Option<String>,
    /// Whether the operation reached a state that changes no more.
    #[serde(default)]
    pub settled: bool,
}

impl Intent {
    /// A new intent for `request` under `key`, not sent yet; `None` if the request cannot be
    /// written as JSON (a filter that is not a finite number, say).
    pub fn new<R: Serialize>(key: String, request: &R) -> Option<Intent> {
        let request = serde_json::value::to_raw_value(request).ok()?;
        Some(Intent { key, request, id: None, settled: false })
    }
}

impl PartialEq for Intent {
    fn eq(&self, other: &Intent) -> bool {
        self.key == other.key && self.request.get() == other.request.get() && self.id == other.id && self.settled == other.settled
    }
}

/// Where intents are kept: localStorage in the browser, a map in unit tests.
pub trait IntentStorage {
    /// The intent in `slot`, if any can be read.
    fn load(&self, slot: &str) -> Option<Intent>;
    /// Stores `intent` in `slot`; false when the browser refused.
    fn store(&self, slot: &str, intent: &Intent) -> bool;
    /// Empties `slot`.
    fn remove(&self, slot: &str);
}

/// The slot of one user's intent of one lane (`intent` for exports, `import` for imports): per
/// tenant and user, so one browser shared by two accounts never resumes the other's operation.
pub fn slot_of(lane: &str, tenant: &str, email: &str) -> String {
    format!("exportd.{lane}.{tenant}.{email}")
}

/// The drives of one tab: each new drive (a click, a resume, a message from another tab)
/// supersedes the one before it.
#[derive(Debug, Default)]
pub struct Drives {
    current: Cell<u32>,
}

/// One drive's ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drive(u32);

impl Drives {
    /// Starts a new drive; every earlier one is superseded.
    pub fn start(&self) -> Drive {
        let next = self.current.get().wrapping_add(1);
        self.current.set(next);
        Drive(next)
    }

    /// Supersedes every drive without starting one (sign-out).
    pub fn stop_all(&self) {
        self.start();
    }

    /// Whether `drive` is still the tab's current one.
    pub fn is_current(&self, drive: Drive) -> bool {
        self.current.get() == drive.0
    }
}

/// Whether `drive` may still act on `intent`: it is the tab's current drive, and the stored
/// intent is still this one (another tab may have started a newer one).
pub fn still_owns<S: IntentStorage>(storage: &S, drives: &Drives, drive: Drive, slot: &str, intent: &Intent) -> bool {
    drives.is_current(drive) && storage.load(slot).is_some_and(|stored| stored.key == intent.key)
}

/// Stores `intent` if `drive` still owns it; false when it was superseded (nothing written).
pub fn store_if_owned<S: IntentStorage>(storage: &S, drives: &Drives, drive: Drive, slot: &str, intent: &Intent) -> bool {
    still_owns(storage, drives, drive, slot, intent) && storage.store(slot, intent)
}

/// Removes `intent` if `drive` still owns it; false when it was superseded (nothing removed).
pub fn remove_if_owned<S: IntentStorage>(storage: &S, drives: &Drives, drive: Drive, slot: &str, intent: &Intent) -> bool {
    if still_owns(storage, drives, drive, slot, intent) {
        storage.remove(slot);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    #[derive(Default)]
    struct MapStorage(RefCell<HashMap<String, Intent>>);

    impl IntentStorage for MapStorage {
        fn load(&self, slot: &str) -> Option<Intent> {
            self.0.borrow().get(slot).cloned()
        }
        fn store(&self, slot: &str, intent: &Intent) -> bool {
            self.0.borrow_mut().insert(slot.to_owned(), intent.clone());
            true
        }
        fn remove(&self, slot: &str) {
            self.0.borrow_mut().remove(slot);
        }
    }

    fn intent(key: &str) -> Intent {
        Intent::new(key.to_owned(), &crate::model::ExportRequest::new("orders")).expect("a default request is JSON")
    }

    #[test]
    fn a_drive_superseded_in_its_own_tab_neither_writes_nor_deletes_the_intent() {
        let (storage, drives, slot) = (MapStorage::default(), Drives::default(), slot_of("intent", "acme", "bob@acme.test"));
        let first = intent("k1");
        storage.store(&slot, &first);
        let old = drives.start();
        let new = drives.start();
        let with_id = Intent { id: Some("exp_1".into()), ..first.clone() };
        assert!(!store_if_owned(&storage, &drives, old, &slot, &with_id));
        assert!(!remove_if_owned(&storage, &drives, old, &slot, &first));
        assert_eq!(storage.load(&slot), Some(first.clone()));
        assert!(store_if_owned(&storage, &drives, new, &slot, &with_id));
        assert_eq!(storage.load(&slot).and_then(|i| i.id), Some("exp_1".into()));
    }

    #[test]
    fn a_drive_whose_intent_another_tab_replaced_leaves_the_newer_intent_alone() {
        let (storage, drives, slot) = (MapStorage::default(), Drives::default(), slot_of("intent", "acme", "bob@acme.test"));
        let mine = intent("k1");
        storage.store(&slot, &mine);
        let drive = drives.start();
        // Another tab stores its own intent while this drive awaits an answer.
        let theirs = intent("k2");
        storage.store(&slot, &theirs);
        assert!(!store_if_owned(&storage, &drives, drive, &slot, &Intent { id: Some("exp_1".into()), ..mine.clone() }));
        assert!(!remove_if_owned(&storage, &drives, drive, &slot, &mine));
        assert_eq!(storage.load(&slot), Some(theirs));
    }

    #[test]
    fn a_sign_out_stops_every_drive() {
        let drives = Drives::default();
        let d = drives.start();
        drives.stop_all();
        assert!(!drives.is_current(d));
    }

    #[test]
    fn slots_are_per_lane_tenant_and_user() {
        assert_ne!(slot_of("intent", "acme", "bob@acme.test"), slot_of("intent", "globex", "bob@acme.test"));
        assert_ne!(slot_of("intent", "acme", "bob@acme.test"), slot_of("import", "acme", "bob@acme.test"));
    }
}
