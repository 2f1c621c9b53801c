//! The types the browser and the server share: what a client asks for, what it is shown, and the
//! states an export moves through (SPEC §3–§4).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The stored state of an export operation (SPEC §4). The worker, the cancel call and the janitor
/// move operations between these; `Ready`, `Failed` and `Cancelled` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum ExportStatus {
    /// Accepted and waiting for a worker. In: create. Out: worker claim, cancel, janitor (queue TTL).
    Queued,
    /// Claimed by a worker holding a lease. In: worker claim. Out: release, failure, cancel, janitor, hand-back.
    Running,
    /// A transient failure; claimable again after `next_attempt_at`. In: worker or janitor. Out: claim, cancel.
    RetryWait,
    /// Cancel asked while running; the worker stops at its next checkpoint. In: cancel. Out: worker, janitor.
    CancelRequested,
    /// Terminal: cancelled before it finished.
    Cancelled,
    /// Terminal: the artifact is published.
    Ready,
    /// Terminal: failed permanently or ran out of attempts.
    Failed,
}

impl ExportStatus {
    /// Every status, in the order of SPEC §4.
    pub const ALL: [ExportStatus; 7] = [
        ExportStatus::Queued,
        ExportStatus::Running,
        ExportStatus::RetryWait,
        ExportStatus::CancelRequested,
        ExportStatus::Cancelled,
        ExportStatus::Ready,
        ExportStatus::Failed,
    ];

    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportStatus::Queued => "queued",
            ExportStatus::Running => "running",
            ExportStatus::RetryWait => "retry_wait",
            ExportStatus::CancelRequested => "cancel_requested",
            ExportStatus::Cancelled => "cancelled",
            ExportStatus::Ready => "ready",
            ExportStatus::Failed => "failed",
        }
    }

    /// Parses a stored status name.
    pub fn parse(name: &str) -> Option<ExportStatus> {
        ExportStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, ExportStatus::Ready | ExportStatus::Failed | ExportStatus::Cancelled)
    }
}

/// A time range preset (SPEC §3.1), resolved in the request's timezone at acceptance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Preset {
    /// The local day before today.
    Yesterday,
    /// The seven local days before today.
    #[serde(rename = "last_7_days")]
    Last7Days,
    /// From the first of this month to the first of next month.
    ThisMonth,
}

/// The time range of a request: a preset, or inclusive local dates `YYYY-MM-DD`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum TimeRange {
    /// A named range relative to the local day of acceptance.
    Preset {
        /// Which preset.
        preset: Preset,
    },
    /// Explicit local days, `to` inclusive.
    Dates {
        /// First local day.
        #[cfg_attr(feature = "ssr", schema(pattern = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
        from: String,
        /// Last local day (inclusive).
        #[cfg_attr(feature = "ssr", schema(pattern = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
        to: String,
    },
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange::Preset { preset: Preset::Last7Days }
    }
}

/// Options of the produced file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ExportOptions {
    /// Start the file with a UTF-8 byte order mark, for spreadsheet software.
    #[serde(default)]
    pub bom: bool,
    /// `gzip` delivers `.csv.gz` (`application/gzip`) instead of `.csv`.
    #[serde(default)]
    pub compression: Compression,
    /// The language of an XLSX header row's titles (SPEC §14); in the fingerprint only when it
    /// is not English.
    #[serde(default, skip_serializing_if = "FileLanguage::is_default")]
    pub language: FileLanguage,
}

/// The language of a workbook's header row: its columns' titles, and with `ar` a right-to-left
/// sheet. It never changes the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum FileLanguage {
    /// English titles.
    #[default]
    En,
    /// Arabic titles, the sheet right-to-left.
    Ar,
}

impl FileLanguage {
    fn is_default(&self) -> bool {
        *self == FileLanguage::En
    }

    /// Its code, `en` or `ar`.
    pub fn code(self) -> &'static str {
        match self {
            FileLanguage::En => "en",
            FileLanguage::Ar => "ar",
        }
    }
}

/// The file an export writes (SPEC §3.1, §14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum FileFormat {
    /// RFC 4180 CSV, text defused.
    #[default]
    Csv,
    /// An Office Open XML workbook with typed cells.
    Xlsx,
}

/// How a file is compressed (SPEC §3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Compression {
    /// Plain CSV.
    #[default]
    None,
    /// gzip: sizes and digests are of the compressed bytes.
    Gzip,
}

/// How an export is read and delivered (SPEC §3.1, §5.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Consistency {
    /// One snapshot, one file; a crash starts it again.
    #[default]
    Snapshot,
    /// Parts in key order, each read in its own short snapshot and checkpointed, delivered as a
    /// ZIP bundle with a manifest; a crash resumes after the last checkpointed part.
    Checkpointed,
}

fn default_timezone() -> String {
    "UTC".to_owned()
}

/// The body of `POST /api/exports` (SPEC §3.1). Deserialising fills in the defaults, so the value
/// is the request "with defaults filled in" that the fingerprint and `ExportView.request` use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ExportRequest {
    /// The report's name, e.g. `orders`.
    #[cfg_attr(feature = "ssr", schema(pattern = "^(orders|customers)$"))]
    pub report: String,
    /// Filter name → value; which filters exist depends on the report.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", schema(value_type = Object))]
    pub filters: BTreeMap<String, serde_json::Value>,
    /// The columns asked for; `null` means every column the role may read.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// The file format: `csv` (the default) or `xlsx`.
    #[serde(default)]
    pub format: FileFormat,
    /// The rows' time range.
    #[serde(default)]
    pub time_range: TimeRange,
    /// The IANA timezone the dates are local to.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// File options.
    #[serde(default)]
    pub options: ExportOptions,
    /// `checkpointed` for exports too large to redo (SPEC §5.1).
    #[serde(default)]
    pub consistency: Consistency,
    /// Whom to tell when it ends; absent, nobody (and the fingerprint is as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
}

/// Whom to tell when an operation ends (contract §15): a signed webhook, emails, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Notify {
    /// An `https://` URL to POST a signed webhook to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// Addresses to email.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub email: Vec<String>,
    /// The email's language.
    #[serde(default)]
    pub language: FileLanguage,
}


impl ExportRequest {
    /// What the browser puts in an operation's `request`, which it never reads (the stored
    /// intent keeps the request the page sent).
    #[cfg(feature = "hydrate")]
    fn not_read() -> ExportRequest {
        ExportRequest::new("")
    }

    /// A request for `report` with every default.
    pub fn new(report: &str) -> ExportRequest {
        ExportRequest {
            report: report.to_owned(),
            filters: BTreeMap::new(),
            columns: None,
            format: FileFormat::Csv,
            time_range: TimeRange::default(),
            timezone: default_timezone(),
            options: ExportOptions::default(),
            consistency: Consistency::default(),
            notify: None,
        }
    }
}

/// What acceptance fixed for good: the UTC half-open interval, the columns after the role's
/// policy, and the deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ResolvedContract {
    /// Start of the interval (inclusive), RFC 3339 UTC.
    pub from: String,
    /// End of the interval (exclusive), RFC 3339 UTC.
    pub to: String,
    /// The timezone the range was resolved in.
    pub timezone: String,
    /// The columns of the file, in order.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub columns: Vec<String>,
    /// The deployment whose worker and store serve this export.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub deployment: String,
}

/// How far a running export has got.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Progress {
    /// Data rows written so far (of a checkpointed export: its checkpointed parts' and the
    /// current part's; it never goes back: after a resume it holds until the resumed attempt
    /// passes it).
    pub rows_written: i64,
    /// Rows in the snapshot, once counted (of a checkpointed export: at its first claim).
    pub rows_total: Option<i64>,
    /// A checkpointed export's checkpointed parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts_done: Option<i64>,
    /// A checkpointed export's parts in all, as its row count at the first claim gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts_expected: Option<i64>,
}

/// The published file of a ready export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ArtifactView {
    /// Hex SHA-256 of the file's bytes.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: i64,
    /// Data rows (the header not counted).
    pub rows: i64,
    /// When retention removes the file, RFC 3339 UTC.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub expires_at: String,
    /// Whether retention has removed it already.
    pub expired: bool,
    /// A checkpointed export's parts, in order (its `sha256` is then the manifest's and `bytes`
    /// the bundle's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<PartView>>,
}

/// One part of a checkpointed export (SPEC §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct PartView {
    /// 1, 2, …
    pub index: i64,
    /// Data rows.
    pub rows: i64,
    /// Size in bytes (compressed, with gzip).
    pub bytes: i64,
    /// Hex SHA-256 of its bytes.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub sha256: String,
    /// Its first row's key (`order_id`, `customer_id`); null for a part with no rows.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub first_key: Option<i64>,
    /// Its last row's key.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub last_key: Option<i64>,
    /// When its snapshot was taken, RFC 3339 UTC.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub read_at: String,
}

/// A freshly minted download link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DownloadView {
    /// The signed link.
    pub url: String,
    /// When the link stops working, RFC 3339 UTC.
    pub expires_at: String,
}

/// Why an export failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ErrorView {
    /// A stable code, e.g. `storage_unavailable`.
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// Whether a new export of the same request may succeed.
    pub retryable: bool,
    /// The reference to quote to support; it is in the server's log.
    pub support_ref: Option<String>,
}

// The browser build (`hydrate`) skips, unread, the fields the page never shows (the request, the
// links, the parts' keys and digests, …): the wasm then carries no decoder for them.
/// An export operation as the API shows it (SPEC §3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ExportView {
    /// `exp_…`.
    pub id: String,
    /// The stored state.
    pub status: ExportStatus,
    /// Where to poll.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub status_url: String,
    /// The report's name.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub report: String,
    /// The request with defaults filled in.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing, default = "ExportRequest::not_read"))]
    pub request: ExportRequest,
    /// What acceptance resolved.
    pub resolved: ResolvedContract,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// Claims that were not handed back.
    pub attempt: i32,
    /// When a `retry_wait` export may run again.
    pub next_attempt_at: Option<String>,
    /// While it runs: when its attempt last made progress (rows, bytes uploaded, digest read,
    /// copy); null otherwise.
    #[serde(default)]
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub last_progress_at: Option<String>,
    /// Rows written and counted.
    pub progress: Progress,
    /// The file, once ready.
    pub artifact: Option<ArtifactView>,
    /// A fresh link, when ready and the reader may download.
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub download: Option<DownloadView>,
    /// Why it failed.
    pub error: Option<ErrorView>,
}

/// A page of `GET /api/exports` (and of the page's `list_exports`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ExportList {
    /// The exports, newest first.
    pub items: Vec<ExportView>,
    /// Where the next page starts; null on the last page.
    pub next_cursor: Option<String>,
}

/// What the page's forms offer, from the server's catalog: its reports with their filters, and
/// its datasets, each with its titles. The server writes it into the page, so a new report in the
/// catalog needs no change to the page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCatalog {
    /// The reports, in the catalog's order.
    pub reports: Vec<PageReport>,
    /// The datasets, in the catalog's order.
    pub datasets: Vec<PageTitled>,
    /// The name of the organisation's OpenID Connect provider, when sign-in through it is set
    /// up: the sign-in form then offers "Sign in with NAME".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign_in_with: Option<String>,
}

/// A name and its titles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageTitled {
    /// The name in requests.
    pub name: String,
    /// The English title, if any.
    pub en: Option<String>,
    /// The Arabic title, if any.
    pub ar: Option<String>,
}

impl PageTitled {
    /// The title in `language` (`ar` or `en`): that one, else English, else the name.
    pub fn title(&self, language: &str) -> &str {
        let translated = if language == "ar" { self.ar.as_deref() } else { None };
        translated.or(self.en.as_deref()).unwrap_or(&self.name)
    }
}

/// A report the export form offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageReport {
    /// Its name and titles.
    #[serde(flatten)]
    pub titled: PageTitled,
    /// Its filters, in the catalog's order.
    pub filters: Vec<PageFilter>,
}

/// A filter the export form offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageFilter {
    /// Its name in requests.
    pub name: String,
    /// `one_of`, `countries`, `equals`, `at_least` or `at_most`.
    pub test: String,
    /// The type of its one value (`text`, `integer`, `decimal`, `money`, `date`, `boolean`), for
    /// the tests that take one.
    pub of: Option<String>,
    /// The values a `one_of` filter offers.
    pub values: Vec<String>,
}

/// The signed-in user, as `GET /api/session` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SessionView {
    /// The user's email.
    pub email: String,
    /// `admin`, `analyst` or `viewer`.
    pub role: String,
    /// The tenant's slug.
    pub tenant: String,
}

/// The body of `POST /api/session`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct LoginRequest {
    /// The user's email.
    pub email: String,
    /// The user's password.
    pub password: String,
}

/// An RFC 9457 problem as the API sends it; the browser reads `code` and `title`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Problem {
    /// `https://exportd.dev/problems/<code>`.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub problem_type: String,
    /// The stable code.
    pub code: String,
    /// A short sentence.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// More about this occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The fields that failed validation (`invalid-request`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ProblemField>>,
    /// The operation a reused key is bound to (`idempotency-key-reused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub operation_ref: Option<String>,
    /// The reference of an internal error in the server's log (`internal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub support_ref: Option<String>,
    /// The export a 409 `export-already-finished` is about, as it is now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "hydrate", serde(skip_deserializing))]
    pub export: Option<Box<ExportView>>,
    /// Seconds to wait before asking again (`too-many-exports`, `rate-limited`); the same as the
    /// `Retry-After` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem with `code`, `status` and `title`, and no extensions.
    pub fn new(code: &str, status: u16, title: &str) -> Problem {
        Problem {
            problem_type: format!("https://exportd.dev/problems/{code}"),
            code: code.to_owned(),
            title: title.to_owned(),
            status,
            detail: None,
            errors: None,
            operation_ref: None,
            support_ref: None,
            export: None,
            retry_after: None,
        }
    }
}

/// One field that failed validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ProblemField {
    /// JSON pointer into the request.
    pub pointer: String,
    /// What is wrong with it.
    pub detail: String,
}

impl ProblemField {
    /// A field error at `pointer`.
    pub fn new(pointer: impl Into<String>, detail: impl Into<String>) -> ProblemField {
        ProblemField { pointer: pointer.into(), detail: detail.into() }
    }
}

/// What the page shows for an export: the stored states of SPEC §4 plus the browser's own
/// `Idle`, `Submitting`, `Resuming` and `Expired` (SPEC §7). Only a settled state lets a new
/// intent start, so a click, a reload or a second tab can never make a second operation while
/// one is in flight.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportState {
    /// Nothing asked yet, and no stored intent.
    Idle,
    /// The click happened; the create call has not been answered yet (or is being retried with
    /// the same key).
    Submitting,
    /// A stored intent was found (after a reload, a sign-in or from another tab); its operation's
    /// state is not known yet.
    Resuming,
    /// Waiting for a worker.
    Queued,
    /// A worker is writing rows.
    Running {
        /// Rows written.
        rows_written: i64,
        /// Rows in the snapshot, once counted.
        rows_total: Option<i64>,
        /// A checkpointed export's checkpointed parts.
        parts_done: Option<i64>,
        /// A checkpointed export's expected parts, once its plan is fixed.
        parts_expected: Option<i64>,
    },
    /// A temporary failure; a worker tries again at `next_attempt_at`.
    RetryWait {
        /// When, RFC 3339 UTC.
        next_attempt_at: Option<String>,
        /// Attempts made so far.
        attempt: i32,
    },
    /// Cancel asked; the worker stops at its next checkpoint.
    CancelRequested,
    /// Cancelled; nothing was published.
    Cancelled,
    /// The file can be downloaded.
    Ready {
        /// Data rows in the file.
        rows: i64,
        /// The file's size in bytes (a checkpointed export's: its bundle's).
        bytes: i64,
        /// Hex SHA-256 of the file (a checkpointed export's: its manifest's).
        sha256: String,
        /// A checkpointed export's parts, each downloadable alone; empty for one file.
        parts: Vec<PartView>,
    },
    /// The file was removed by retention.
    Expired,
    /// Failed for good.
    Failed {
        /// The stable code, e.g. `permission_revoked`.
        code: String,
        /// Why, for people.
        message: String,
        /// Whether a new export of the same request may succeed.
        retryable: bool,
        /// The reference to quote to support.
        support_ref: Option<String>,
    },
}

impl ExportState {
    /// The state a view of the operation shows.
    pub fn from_view(view: &ExportView) -> ExportState {
        match view.status {
            ExportStatus::Queued => ExportState::Queued,
            ExportStatus::Running => ExportState::Running {
                rows_written: view.progress.rows_written,
                rows_total: view.progress.rows_total,
                parts_done: view.progress.parts_done,
                parts_expected: view.progress.parts_expected,
            },
            ExportStatus::RetryWait => ExportState::RetryWait {
                next_attempt_at: view.next_attempt_at.clone(),
                attempt: view.attempt,
            },
            ExportStatus::CancelRequested => ExportState::CancelRequested,
            ExportStatus::Cancelled => ExportState::Cancelled,
            ExportStatus::Ready => match &view.artifact {
                Some(a) if !a.expired => ExportState::Ready { rows: a.rows, bytes: a.bytes, sha256: a.sha256.clone(), parts: a.parts.clone().unwrap_or_default() },
                _ => ExportState::Expired,
            },
            ExportStatus::Failed => match &view.error {
                Some(e) => ExportState::Failed {
                    code: e.code.clone(),
                    message: e.message.clone(),
                    retryable: e.retryable,
                    support_ref: e.support_ref.clone(),
                },
                None => ExportState::Failed { code: "failed".to_owned(), message: String::new(), retryable: true, support_ref: None },
            },
        }
    }

    /// Whether the operation behind this state will change no more, so a new intent may start.
    pub fn is_settled(&self) -> bool {
        matches!(
            self,
            ExportState::Idle | ExportState::Cancelled | ExportState::Ready { .. } | ExportState::Expired | ExportState::Failed { .. }
        )
    }

    /// Whether the operation may still be cancelled from the page.
    pub fn is_cancellable(&self) -> bool {
        matches!(self, ExportState::Queued | ExportState::Running { .. } | ExportState::RetryWait { .. })
    }

    /// Whether "Retry export" (a new intent with a new key) is offered: only after a terminal
    /// failure that allows it.
    pub fn offers_retry(&self) -> bool {
        matches!(self, ExportState::Failed { retryable: true, .. })
    }

    /// A stable name for the state, used as a test hook on the page and as the key of its
    /// translated explanation.
    pub fn name(&self) -> &'static str {
        match self {
            ExportState::Idle => "idle",
            ExportState::Submitting => "submitting",
            ExportState::Resuming => "resuming",
            ExportState::Queued => "queued",
            ExportState::Running { .. } => "running",
            ExportState::RetryWait { .. } => "retry_wait",
            ExportState::CancelRequested => "cancel_requested",
            ExportState::Cancelled => "cancelled",
            ExportState::Ready { .. } => "ready",
            ExportState::Expired => "expired",
            ExportState::Failed { .. } => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_with_only_a_report_gets_every_default() {
        let req: ExportRequest = serde_json::from_str(r#"{"report":"orders"}"#).unwrap();
        assert_eq!(req, ExportRequest::new("orders"));
        let back = serde_json::to_value(&req).unwrap();
        assert_eq!(back["time_range"]["preset"], "last_7_days");
        assert_eq!(back["timezone"], "UTC");
        assert_eq!(back["options"]["bom"], false);
        assert!(back["columns"].is_null());
    }

    #[test]
    fn explicit_dates_and_presets_both_parse() {
        let req: ExportRequest = serde_json::from_str(
            r#"{"report":"orders","time_range":{"from":"2026-01-01","to":"2026-01-31"}}"#,
        )
        .unwrap();
        assert_eq!(
            req.time_range,
            TimeRange::Dates { from: "2026-01-01".into(), to: "2026-01-31".into() }
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<ExportRequest>(r#"{"report":"orders","bucket":"x"}"#).is_err());
    }

    #[test]
    fn every_status_name_round_trips() {
        for s in ExportStatus::ALL {
            assert_eq!(ExportStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn a_resuming_page_is_unsettled_so_export_stays_disabled_until_the_operation_is_known() {
        assert!(!ExportState::Resuming.is_settled());
        assert!(!ExportState::Submitting.is_settled());
        assert!(ExportState::Idle.is_settled());
    }

    #[test]
    fn only_a_retryable_failure_offers_a_new_export() {
        let failed = |retryable| ExportState::Failed { code: "x".into(), message: String::new(), retryable, support_ref: None };
        assert!(failed(true).offers_retry());
        assert!(!failed(false).offers_retry());
        assert!(!ExportState::Cancelled.offers_retry());
    }
}

/// A file sent for an import (SPEC §10): the answer of `POST /api/uploads`, 201 when new, 200
/// for the same bytes from the same user again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UploadView {
    /// `upl_…`.
    pub upload: String,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// The file's size.
    pub bytes: i64,
}

/// What an import does with the file (SPEC §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ImportMode {
    /// Check every row and predict what the apply would do; write nothing.
    DryRun,
    /// Apply the valid rows.
    #[default]
    Apply,
}

/// What an import does with invalid rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Any invalid row fails the import before anything is written.
    #[default]
    Abort,
    /// Valid rows are applied, invalid ones reported.
    SkipInvalid,
}

/// The body of `POST /api/imports`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// `customers` or `orders`.
    pub dataset: String,
    /// `upl_…`, an upload of the caller's.
    pub upload: String,
    /// `apply` (default) or `dry_run`.
    #[serde(default)]
    pub mode: ImportMode,
    /// `abort` (default) or `skip_invalid`.
    #[serde(default)]
    pub on_error: OnError,
    /// With `skip_invalid` only: more invalid rows than this fail the import.
    #[serde(default)]
    pub max_errors: Option<u64>,
    /// Whom to tell when it ends; absent, nobody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
}

/// An import's file, by content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UploadRef {
    /// Hex SHA-256.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: i64,
}

/// An import's counts: `valid + invalid = rows`, `created + updated + unchanged = valid` once
/// known, `applied` the rows in committed batches (0 for a dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ImportCounts {
    /// Data records in the file.
    pub rows: i64,
    /// Records with no error.
    pub valid: i64,
    /// Records with at least one error.
    pub invalid: i64,
    /// Valid rows that create a record.
    pub created: i64,
    /// Valid rows that change a record.
    pub updated: i64,
    /// Valid rows equal to their record.
    pub unchanged: i64,
    /// Rows in committed batches.
    pub applied: i64,
}

/// One error of one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RowError {
    /// The physical line where the record starts (the header is line 1); in a workbook, the
    /// row of its sheet.
    pub line: i64,
    /// In a workbook, the sheet's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
    /// The column, or empty for the whole record.
    pub column: String,
    /// A stable code.
    pub code: String,
    /// A sentence for people.
    pub message: String,
}

/// How far an import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ImportProgress {
    /// Records done in the current phase.
    pub rows_done: i64,
    /// Records in the file, once known.
    pub rows_total: Option<i64>,
}

/// The report file of an import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ReportView {
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: i64,
    /// When retention removes it, RFC 3339 UTC.
    pub expires_at: String,
    /// Whether retention has removed it already.
    pub expired: bool,
}

/// An import operation (SPEC §10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ImportView {
    /// `imp_…`.
    pub id: String,
    /// Always `import`.
    pub kind: String,
    /// The stored state (the states of exports).
    pub status: ExportStatus,
    /// While running: `validating` or `applying`.
    pub phase: Option<String>,
    /// `customers` or `orders`.
    pub dataset: String,
    /// `apply` or `dry_run`.
    pub mode: ImportMode,
    /// `abort` or `skip_invalid`.
    pub on_error: OnError,
    /// The file.
    pub upload: UploadRef,
    /// The counts so far.
    pub counts: ImportCounts,
    /// The first errors, in input order (at most 10).
    pub first_errors: Vec<RowError>,
    /// How far it is.
    pub progress: ImportProgress,
    /// The report, once written.
    pub report: Option<ReportView>,
    /// Where the report stands: `written`, `pending` (an import that ended failed or cancelled
    /// gets its report shortly, from its worker or the janitor) or `none` (nothing ended yet, or
    /// it ended before any row was read).
    #[serde(default)]
    pub report_status: ReportStatus,
    /// A fresh link to the report, when there is one and the reader may read it.
    pub download: Option<DownloadView>,
    /// Why it failed.
    pub error: Option<ErrorView>,
    /// Claims that were not handed back.
    pub attempt: i32,
    /// When a `retry_wait` import may run again.
    pub next_attempt_at: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
}

/// Where an import's report stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    /// It has one.
    Written,
    /// It ended failed or cancelled after its file was read: its report is being written.
    Pending,
    /// It has none: it has not ended, or it ended before any row was read.
    #[default]
    None,
}

/// A page of `GET /api/imports`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ImportList {
    /// The imports, newest first.
    pub items: Vec<ImportView>,
    /// Where the next page starts; null on the last page.
    pub next_cursor: Option<String>,
}
