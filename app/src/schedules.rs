//! A schedule's request and views (SPEC §15): what `POST /api/schedules` takes and what the
//! schedules API answers, shared by the server and the page.

pub use crate::model::Notify;
use crate::model::{ExportOptions, FileFormat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which days a schedule is due on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Every {
    /// Every day.
    Day,
    /// One day a week (`weekday`).
    Week,
    /// One day a month (`day`).
    Month,
}

/// The day of the month a monthly schedule is due: 1–28, or `"last"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum MonthDay {
    /// A day from 1 to 28.
    Day(u8),
    /// `"last"`.
    Named(String),
}

/// When a schedule is due, in its timezone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Cadence {
    /// How often.
    pub every: Every,
    /// The local time, `HH:MM`.
    #[cfg_attr(feature = "ssr", schema(pattern = "^[0-2][0-9]:[0-5][0-9]$"))]
    pub at: String,
    /// With `week`: the ISO weekday, 1 (Monday) to 7 (Sunday).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekday: Option<u8>,
    /// With `month`: the day, 1–28 or `"last"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<MonthDay>,
}

/// The days each run exports, before its due day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum ScheduleWindow {
    /// The day before.
    PreviousDay,
    /// The Monday-to-Sunday week before the due day's.
    PreviousWeek,
    /// The calendar month before the due day's.
    PreviousMonth,
}

/// The role a schedule's service identity runs with, at most its owner's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum ScheduleRole {
    /// The default.
    #[default]
    Analyst,
    /// Every column, personal data included.
    Admin,
}

/// A schedule: the export to run and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ScheduleRequest {
    /// The report's name.
    pub report: String,
    /// Filter name → value.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", schema(value_type = Object))]
    pub filters: BTreeMap<String, serde_json::Value>,
    /// The columns; `null` means every column the role may read.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// The file format.
    #[serde(default)]
    pub format: FileFormat,
    /// File options.
    #[serde(default)]
    pub options: ExportOptions,
    /// The IANA timezone of the due times and the windows.
    pub timezone: String,
    /// When it is due.
    pub cadence: Cadence,
    /// What each run exports.
    pub window: ScheduleWindow,
    /// The service identity's role.
    #[serde(default)]
    pub role: ScheduleRole,
    /// Whom to tell when a run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
}

/// One run of a schedule: the operation made for one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ScheduleRun {
    /// The operation's id.
    pub id: String,
    /// The window's start (UTC).
    pub window_start: String,
    /// The operation's status.
    pub status: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ScheduleView {
    /// `sch_…`.
    pub id: String,
    /// The current revision, from 1.
    pub revision: i64,
    /// `active`, `paused` or `deleted`.
    pub status: String,
    /// Why it was paused, when not by a person: `owner_inactive`, `owner_demoted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
    /// The owner's name (the admin who made it).
    pub owner: String,
    /// The service identity's name, `schedule:sch_…`.
    pub service_identity: String,
    /// The current revision's request.
    pub request: ScheduleRequest,
    /// The next due time (RFC 3339), when active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_due: Option<String>,
    /// Its recent runs, newest first (on `GET /api/schedules/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<ScheduleRun>>,
    /// When it was made (RFC 3339).
    pub created_at: String,
}

/// A page of schedules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ScheduleList {
    /// The tenant's schedules, newest first.
    pub items: Vec<ScheduleView>,
}

/// What the page's schedule buttons do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleAction {
    /// `POST …/pause`.
    Pause,
    /// `POST …/resume`.
    Resume,
    /// `DELETE`.
    Delete,
}

/// One attempt of a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NotificationAttempt {
    /// Its number, from 1.
    pub attempt: i32,
    /// When it ended (RFC 3339).
    pub at: String,
    /// `delivered`, `rejected` (an answer other than 2xx, a redirect included), `refused` (the
    /// target's address is not allowed), `timeout` or `error`.
    pub outcome: String,
    /// The HTTP status (webhooks) or SMTP reply code (emails), when there was one.
    pub status_code: Option<i32>,
}

/// One delivery of an operation's notification: a webhook, or an email to one address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NotificationView {
    /// `msg_…`: the webhook's `webhook-id`, the same on every attempt.
    pub id: String,
    /// The operation it tells of.
    pub operation: String,
    /// `webhook` or `email`.
    pub channel: String,
    /// The webhook's URL or the email address.
    pub target: String,
    /// `export.ready`, `export.failed`, `export.cancelled`, `import.ready`, …
    #[serde(rename = "type")]
    pub event_type: String,
    /// `pending`, `delivered` or `failed` (not delivered within 24 h of retries).
    pub status: String,
    /// Its attempts, oldest first.
    pub attempts: Vec<NotificationAttempt>,
    /// When the terminal transition wrote it (RFC 3339).
    pub created_at: String,
    /// While pending, when it is tried next.
    pub next_attempt_at: Option<String>,
}

/// `GET /api/notifications?operation=ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NotificationList {
    /// Newest first.
    pub items: Vec<NotificationView>,
}
