//! What the page and the browser's logic share: who is signed in, the page's signals, what is
//! shown to the user, and how the form's fields read as a request. It names no other module of
//! the page.

use crate::model::{ExportState, ExportView, Preset, Problem, ProblemField, SessionView};
use leptos::prelude::*;

/// Whether the browser knows who is signed in yet.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub enum SessionState {
    /// Not asked yet (and always so on the server).
    Unknown,
    /// Nobody is signed in.
    SignedOut,
    /// This user is signed in.
    SignedIn(SessionView),
}

impl SessionState {
    /// Whether the signed-in user's role may export and download (SPEC §1: a viewer sees its
    /// past exports and can do neither).
    pub fn may_export(&self) -> bool {
        matches!(self, SessionState::SignedIn(who) if who.role != "viewer")
    }

    /// Whether the signed-in user may upload and import (SPEC §10: admins only).
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    pub fn may_import(&self) -> bool {
        matches!(self, SessionState::SignedIn(who) if who.role == "admin")
    }
}

/// A message for the user, kept as what happened and put in the page's language when shown.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub enum Notice {
    /// exportd did not answer (the page's first call, or a sign-in).
    Unreachable,
    /// The session ended while an export was followed.
    SessionEnded,
    /// The browser refused to store the intent, so nothing was sent.
    CannotStore,
    /// A download link was refused with this problem.
    DownloadRefused(Problem),
    /// The server refused a call with this problem.
    Refused(Problem),
}

/// Why the page stopped following the current intent before its operation settled; shown with
/// "Try again" (the same intent, the same key) and "Discard" (forget it).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub enum Trouble {
    /// No answer, a timeout or a 5xx, for longer than the page keeps trying.
    Unanswered,
    /// An answer that asking again would not change, or the last of answers that kept saying
    /// "later" (`busy`, `too-many-exports`) for longer than the page keeps trying.
    Refused(Problem),
    /// Another tab is starting an export that this tab has not seen within moments.
    OtherTab,
}

/// The export form's fields, as typed.
#[derive(Clone, Copy)]
pub struct FormSignals {
    /// The report's name.
    pub report: RwSignal<String>,
    /// A preset name, or `custom` for the dates.
    pub range: RwSignal<String>,
    /// First local day of a custom range.
    pub from: RwSignal<String>,
    /// Last local day of a custom range.
    pub to: RwSignal<String>,
    /// The IANA timezone (the browser's until changed).
    pub timezone: RwSignal<String>,
    /// The text of each filter's field, by the filter's name (a `countries` filter's codes comma
    /// separated); an empty field leaves the filter out.
    pub filters: RwSignal<std::collections::BTreeMap<String, String>>,
    /// The values chosen of each `one_of` filter, by its name (none = all).
    pub chosen: RwSignal<std::collections::BTreeMap<String, Vec<String>>>,
    /// An Excel workbook (`format: xlsx`) rather than CSV.
    pub xlsx: RwSignal<bool>,
    /// Start the file with a BOM.
    pub bom: RwSignal<bool>,
    /// Read and deliver it in parts that resume (`consistency: checkpointed`).
    pub checkpointed: RwSignal<bool>,
    /// Compress it (`compression: gzip`).
    pub gzip: RwSignal<bool>,
    /// The fields a 422 refused, by JSON pointer.
    pub errors: RwSignal<Vec<ProblemField>>,
}

/// The signals the page and the browser logic share.
#[derive(Clone, Copy)]
pub struct PageSignals {
    /// Who is signed in.
    pub session: RwSignal<SessionState>,
    /// The state of the current (or last) export.
    pub state: RwSignal<ExportState>,
    /// The current operation's id, once known.
    pub op_id: RwSignal<Option<String>>,
    /// Rows written per second while running, from the last two polls.
    pub rows_per_sec: RwSignal<Option<i64>>,
    /// Seconds until a `retry_wait` export runs again.
    pub retry_in: RwSignal<Option<i64>>,
    /// A message for the user (login failure, rejected request, refused download).
    pub notice: RwSignal<Option<Notice>>,
    /// Why the current intent is no longer being tried, until the user chooses.
    pub trouble: RwSignal<Option<Trouble>>,
    /// The form.
    pub form: FormSignals,
    /// The recent exports shown, newest first.
    pub recent: RwSignal<Vec<ExportView>>,
    /// Where the next page of recent exports starts.
    pub next_cursor: RwSignal<Option<String>>,
}

/// The values of the range field: the presets, and `custom` for dates.
pub const RANGES: [&str; 4] = ["yesterday", "last_7_days", "this_month", "custom"];
/// The preset a range field names, if it is one.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub fn preset_of(range: &str) -> Option<Preset> {
    match range {
        "yesterday" => Some(Preset::Yesterday),
        "last_7_days" => Some(Preset::Last7Days),
        "this_month" => Some(Preset::ThisMonth),
        _ => None,
    }
}

/// A number field's text as the JSON the request carries: a number when it reads as one, the
/// text itself otherwise (the server then says which field is wrong), nothing when empty. Read by
/// serde_json's own number reader (`str::parse::<f64>` would bring a second one into the wasm),
/// after writing what a number field accepts as JSON does: `.5` as `0.5`, `05` as `5`.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub fn number_json(text: &str) -> Option<serde_json::Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let (sign, rest) = text.strip_prefix('-').map_or(("", text), |rest| ("-", rest));
    let digits = rest.trim_start_matches('0');
    let json = match digits.as_bytes().first() {
        _ if rest.is_empty() => return Some(text.into()),
        None => format!("{sign}0"),
        Some(b'.' | b'e' | b'E') => format!("{sign}0{digits}"),
        Some(_) => format!("{sign}{digits}"),
    };
    Some(serde_json::from_slice::<serde_json::Number>(json.as_bytes()).map_or_else(|_| text.into(), serde_json::Value::Number))
}

