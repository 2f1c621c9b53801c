//! The page's words and numbers in the user's language: labels, problems, states, dates, sizes.

use crate::i18n::*;
use crate::model::{ExportState, ExportStatus, Problem};
use crate::page_state::{Notice, Trouble};

pub use crate::language::I18n;


pub(crate) fn range_label(i18n: I18n, value: &str) -> String {
    match value {
        "yesterday" => td_string!(i18n.get_locale(), range_yesterday).to_string(),
        "last_7_days" => td_string!(i18n.get_locale(), range_last_7_days).to_string(),
        "this_month" => td_string!(i18n.get_locale(), range_this_month).to_string(),
        _ => td_string!(i18n.get_locale(), range_custom).to_string(),
    }
}

/// The explanation of a failure, in the page's language when its code is a known one.
pub(crate) fn failure_reason(i18n: I18n, code: &str, message: &str) -> String {
    match code {
        "permission_revoked" => td_string!(i18n.get_locale(), failure_permission_revoked).to_string(),
        "storage_unavailable" => td_string!(i18n.get_locale(), failure_storage_unavailable).to_string(),
        "worker_lost" => td_string!(i18n.get_locale(), failure_worker_lost).to_string(),
        "no_worker" => td_string!(i18n.get_locale(), failure_no_worker).to_string(),
        "catalog_mismatch" => td_string!(i18n.get_locale(), failure_catalog_mismatch).to_string(),
        "stalled" => td_string!(i18n.get_locale(), failure_stalled).to_string(),
        "invalid_data" => td_string!(i18n.get_locale(), failure_invalid_data).to_string(),
        "internal" => td_string!(i18n.get_locale(), failure_internal).to_string(),
        _ => message.to_owned(),
    }
}

/// A server problem's title in the page's language, by its code; an unknown code keeps the
/// server's own words.
pub fn problem_text(i18n: I18n, p: &Problem) -> String {
    let text = match p.code.as_str() {
        "network" => td_string!(i18n.get_locale(), problem_network),
        "bad-response" => td_string!(i18n.get_locale(), problem_bad_response),
        "unauthenticated" => td_string!(i18n.get_locale(), problem_unauthenticated),
        "invalid-credentials" => td_string!(i18n.get_locale(), problem_invalid_credentials),
        "cross-origin" => td_string!(i18n.get_locale(), problem_cross_origin),
        "export-not-permitted" => td_string!(i18n.get_locale(), problem_export_not_permitted),
        "permission-revoked" => td_string!(i18n.get_locale(), problem_permission_revoked),
        "export-not-found" => td_string!(i18n.get_locale(), problem_export_not_found),
        "export-already-finished" => td_string!(i18n.get_locale(), problem_export_already_finished),
        "export-not-ready" => td_string!(i18n.get_locale(), problem_export_not_ready),
        "artifact-expired" => td_string!(i18n.get_locale(), problem_artifact_expired),
        "invalid-request" => td_string!(i18n.get_locale(), problem_invalid_request),
        "idempotency-key-reused" => td_string!(i18n.get_locale(), problem_idempotency_key_reused),
        "too-many-exports" => td_string!(i18n.get_locale(), problem_too_many_exports),
        "rate-limited" => td_string!(i18n.get_locale(), problem_rate_limited),
        "busy" | "not-ready" => td_string!(i18n.get_locale(), problem_busy),
        "creation-paused" => td_string!(i18n.get_locale(), problem_creation_paused),
        "internal" => td_string!(i18n.get_locale(), problem_internal),
        "malformed-json" | "body-too-large" => td_string!(i18n.get_locale(), problem_malformed),
        "request-timeout" => td_string!(i18n.get_locale(), problem_request_timeout),
        "link-invalid" | "link-expired" => td_string!(i18n.get_locale(), problem_link),
        _ => return p.detail.as_ref().map(|d| format!("{}: {d}", p.title)).unwrap_or_else(|| p.title.clone()),
    };
    text.to_string()
}

/// A notice in the page's language.
pub(crate) fn notice_text(i18n: I18n, notice: &Notice) -> String {
    match notice {
        Notice::Unreachable => td_string!(i18n.get_locale(), notice_unreachable).to_string(),
        Notice::SessionEnded => td_string!(i18n.get_locale(), notice_session_ended).to_string(),
        Notice::CannotStore => td_string!(i18n.get_locale(), notice_cannot_store).to_string(),
        Notice::DownloadRefused(p) => td_string!(i18n.get_locale(), notice_download_refused, reason = problem_text(i18n, p)).to_string(),
        Notice::Refused(p) => problem_text(i18n, p),
    }
}

/// A trouble in the page's language.
pub(crate) fn trouble_text(i18n: I18n, trouble: &Trouble) -> String {
    match trouble {
        Trouble::Unanswered => td_string!(i18n.get_locale(), trouble_unanswered).to_string(),
        Trouble::Refused(p) => td_string!(i18n.get_locale(), trouble_refused, reason = problem_text(i18n, p)).to_string(),
        Trouble::OtherTab => td_string!(i18n.get_locale(), trouble_other_tab).to_string(),
    }
}

/// A listed filter value's label in the page's language: the demo's order statuses are
/// translated, any other value is shown as it is; the value sent stays the catalog's.
pub(crate) fn order_status_label(i18n: I18n, status: &str) -> String {
    match status {
        "paid" => td_string!(i18n.get_locale(), order_paid).to_string(),
        "pending" => td_string!(i18n.get_locale(), order_pending).to_string(),
        "refunded" => td_string!(i18n.get_locale(), order_refunded).to_string(),
        "cancelled" => td_string!(i18n.get_locale(), order_cancelled).to_string(),
        other => other.to_owned(),
    }
}

/// An operation's status, as the recent list names it in the page's language.
pub(crate) fn status_label(i18n: I18n, status: ExportStatus) -> String {
    match status {
        ExportStatus::Queued => td_string!(i18n.get_locale(), status_queued).to_string(),
        ExportStatus::Running => td_string!(i18n.get_locale(), status_running).to_string(),
        ExportStatus::RetryWait => td_string!(i18n.get_locale(), status_retry_wait).to_string(),
        ExportStatus::CancelRequested => td_string!(i18n.get_locale(), status_cancel_requested).to_string(),
        ExportStatus::Cancelled => td_string!(i18n.get_locale(), status_cancelled).to_string(),
        ExportStatus::Ready => td_string!(i18n.get_locale(), status_ready).to_string(),
        ExportStatus::Failed => td_string!(i18n.get_locale(), status_failed).to_string(),
    }
}

/// A role's name in the page's language.
pub(crate) fn role_label(i18n: I18n, role: &str) -> String {
    match role {
        "admin" => td_string!(i18n.get_locale(), role_admin).to_string(),
        "analyst" => td_string!(i18n.get_locale(), role_analyst).to_string(),
        "viewer" => td_string!(i18n.get_locale(), role_viewer).to_string(),
        other => other.to_owned(),
    }
}

/// The BCP 47 tag of the page's language.
#[cfg(feature = "hydrate")]
pub(crate) fn language_tag(i18n: I18n) -> &'static str {
    if i18n.get_locale() == Locale::ar { "ar" } else { "en" }
}

/// A whole number grouped for the page's language, by the browser's
/// `Intl.NumberFormat`; the server never renders a number (it renders the loading state).
pub fn number(i18n: I18n, n: i64) -> String {
    decimal(i18n, n as f64, 0)
}

/// A number with at most `fraction` decimals, in the page's language.
pub(crate) fn decimal(i18n: I18n, n: f64, fraction: u8) -> String {
    #[cfg(feature = "hydrate")]
    {
        let locales = js_sys::Array::of1(&language_tag(i18n).into());
        let options = js_sys::Object::new();
        let _ = js_sys::Reflect::set(&options, &"maximumFractionDigits".into(), &fraction.into());
        let format = js_sys::Intl::NumberFormat::new(&locales, &options);
        if let Some(text) = format.format().call1(&format, &n.into()).ok().and_then(|v| v.as_string()) {
            return text;
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (i18n, fraction);
    // Whole numbers only: formatting a float would bring Rust's float printing into the wasm
    // for a case that does not happen (every browser has Intl).
    (n.round() as i64).to_string()
}

/// An RFC 3339 instant as a local date and time in the page's language, by the browser's
/// `Intl.DateTimeFormat`.
pub fn date_time(i18n: I18n, rfc3339: &str) -> String {
    #[cfg(feature = "hydrate")]
    {
        let date = js_sys::Date::new(&rfc3339.into());
        if !date.get_time().is_nan() {
            let options = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&options, &"dateStyle".into(), &"medium".into());
            let _ = js_sys::Reflect::set(&options, &"timeStyle".into(), &"short".into());
            let locales = js_sys::Array::of1(&language_tag(i18n).into());
            let format = js_sys::Intl::DateTimeFormat::new(&locales, &options);
            if let Some(text) = format.format().call1(&format, &date).ok().and_then(|v| v.as_string()) {
                return text;
            }
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = i18n;
    rfc3339.replace('T', " ").chars().take(16).collect()
}

/// The days a resolved range covers, as the user chose them: its start and its last day (the
/// resolved end is exclusive), each the date in the export's own timezone, `YYYY-MM-DD`.
pub fn range_days(resolved: &crate::model::ResolvedContract) -> String {
    #[cfg(feature = "hydrate")]
    {
        let day = |ms: f64| -> Option<String> {
            let options = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&options, &"timeZone".into(), &resolved.timezone.as_str().into());
            for (field, style) in [("year", "numeric"), ("month", "2-digit"), ("day", "2-digit")] {
                let _ = js_sys::Reflect::set(&options, &field.into(), &style.into());
            }
            // en-CA writes a date as YYYY-MM-DD.
            let format = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::of1(&"en-CA".into()), &options);
            let date = js_sys::Date::new(&ms.into());
            format.format().call1(&format, &date).ok().and_then(|v| v.as_string())
        };
        let from = js_sys::Date::new(&resolved.from.as_str().into()).get_time();
        let to = js_sys::Date::new(&resolved.to.as_str().into()).get_time();
        if !from.is_nan() && !to.is_nan() {
            if let (Some(first), Some(last)) = (day(from), day(to - 1.0)) {
                return format!("{first} – {last}");
            }
        }
    }
    format!("{} – {}", resolved.from.get(..10).unwrap_or(""), resolved.to.get(..10).unwrap_or(""))
}

/// A byte count for people, in the page's language (its digits and its units).
pub fn human_bytes(i18n: I18n, bytes: i64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        td_string!(i18n.get_locale(), bytes_b, n = number(i18n, bytes)).to_string()
    } else if b < KIB * KIB {
        td_string!(i18n.get_locale(), bytes_kib, n = decimal(i18n, b / KIB, 1)).to_string()
    } else {
        td_string!(i18n.get_locale(), bytes_mib, n = decimal(i18n, b / (KIB * KIB), 1)).to_string()
    }
}

/// The sentence that explains a state, in the page's language.
pub fn describe(i18n: I18n, state: &ExportState, retry_in: Option<i64>) -> String {
    match state {
        ExportState::Idle => td_string!(i18n.get_locale(), state_idle).to_string(),
        ExportState::Submitting => td_string!(i18n.get_locale(), state_submitting).to_string(),
        ExportState::Resuming => td_string!(i18n.get_locale(), state_resuming).to_string(),
        ExportState::Queued => td_string!(i18n.get_locale(), state_queued).to_string(),
        ExportState::Running { rows_written, rows_total, .. } => match rows_total {
            Some(total) => td_string!(i18n.get_locale(), state_running_total, written = number(i18n, *rows_written), total = number(i18n, *total)).to_string(),
            None => td_string!(i18n.get_locale(), state_running, written = number(i18n, *rows_written)).to_string(),
        },
        ExportState::RetryWait { attempt, .. } => match retry_in {
            Some(seconds) if seconds > 0 => td_string!(i18n.get_locale(), state_retry_in, attempt = number(i18n, i64::from(*attempt)), seconds = number(i18n, seconds)).to_string(),
            _ => td_string!(i18n.get_locale(), state_retry_now, attempt = number(i18n, i64::from(*attempt))).to_string(),
        },
        ExportState::CancelRequested => td_string!(i18n.get_locale(), state_cancel_requested).to_string(),
        ExportState::Cancelled => td_string!(i18n.get_locale(), state_cancelled).to_string(),
        ExportState::Ready { rows, bytes, .. } => td_string!(i18n.get_locale(), state_ready, rows = number(i18n, *rows), size = human_bytes(i18n, *bytes)).to_string(),
        ExportState::Expired => td_string!(i18n.get_locale(), state_expired).to_string(),
        ExportState::Failed { code, message, retryable, .. } => {
            let reason = failure_reason(i18n, code, message);
            if *retryable {
                td_string!(i18n.get_locale(), state_failed_retryable, reason = reason).to_string()
            } else {
                td_string!(i18n.get_locale(), state_failed, reason = reason).to_string()
            }
        }
    }
}

/// What a screen reader is told when the state changes: one sentence per kind of state, with
/// no numbers, so a poll or a countdown second that changes only numbers says nothing again.
pub fn announcement(i18n: I18n, state: &ExportState) -> String {
    match state {
        ExportState::Idle => String::new(),
        ExportState::Running { .. } => td_string!(i18n.get_locale(), announce_running).to_string(),
        ExportState::RetryWait { .. } => td_string!(i18n.get_locale(), announce_retry_wait).to_string(),
        ExportState::Ready { .. } => td_string!(i18n.get_locale(), announce_ready).to_string(),
        other => describe(i18n, other, None),
    }
}

