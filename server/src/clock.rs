//! Wall-clock time for the service layer, injectable so tests can fix "now".

use std::sync::Arc;

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Now, as a UTC instant.
    fn now(&self) -> jiff::Timestamp;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Milliseconds since the Unix epoch of an instant.
pub fn millis(ts: jiff::Timestamp) -> i64 {
    ts.as_millisecond()
}

/// RFC 3339 UTC text of epoch milliseconds (as stored in the database).
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => String::from("1970-01-01T00:00:00Z"),
    }
}
