//! The page's import section (SPEC §10 "Browser"): the dataset, the file (uploaded at once, with
//! a progress bar), the on-error choice, "Check file" (a dry run) and "Import"; then the import's
//! states and phases, its counts, its first errors and its report's download.
//!
//! The section is loaded after the page, from its own wasm file (`#[lazy]`, split out by
//! `cargo leptos build --split`), and only for users who may import: the export page's wasm,
//! which every visitor waits for, carries none of it. An import is driven by the export's intent
//! rules (`client::Lane`): one key per intent in localStorage, resumed after a reload without a
//! new POST, one operation across tabs. The chosen file's upload is kept beside the intent, so
//! after a reload the file need not be chosen again.

use crate::client::{self, Lane, LaneTab};
use crate::i18n::*;
use crate::model::{ExportStatus, ImportMode, ImportRequest, ImportView, OnError, Problem, UploadView};
use crate::format::{date_time, human_bytes, number, problem_text, I18n};
use crate::page_state::{Notice, PageSignals, Trouble};
use crate::sfn;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos::task::spawn_local;
use serde::{Deserialize, Serialize};
use wasm_bindgen::{closure::Closure, JsCast};

/// What the import section shows about the current import.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportState {
    /// Nothing asked yet, and no stored intent.
    Idle,
    /// "Check file" or "Import" was clicked; the create is not answered yet.
    Submitting,
    /// A stored intent was found; its import's state is not known yet.
    Resuming,
    /// The import as the server last told it.
    Known(Box<ImportView>),
}

impl ImportState {
    /// A stable name: the browser's own states, or the server's status.
    fn name(&self) -> &'static str {
        match self {
            ImportState::Idle => "idle",
            ImportState::Submitting => "submitting",
            ImportState::Resuming => "resuming",
            ImportState::Known(v) => v.status.as_str(),
        }
    }

    /// Whether a new intent may start: nothing is in flight.
    fn is_settled(&self) -> bool {
        match self {
            ImportState::Idle => true,
            ImportState::Known(v) => v.status.is_terminal(),
            _ => false,
        }
    }
}

/// The uploaded file the next "Check file" or "Import" sends, with the form's choices; kept in
/// localStorage beside the intent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Chosen {
    /// The upload's answer.
    upload: UploadView,
    /// The file's name, as the user chose it.
    name: String,
}

/// The import section's signals.
#[derive(Clone, Copy)]
struct Imports {
    page: PageSignals,
    state: RwSignal<ImportState>,
    trouble: RwSignal<Option<Trouble>>,
    notice: RwSignal<Option<Notice>>,
    dataset: RwSignal<String>,
    on_error: RwSignal<OnError>,
    chosen: RwSignal<Option<Chosen>>,
    /// Bytes sent and the file's size while it uploads.
    uploading: RwSignal<Option<(i64, i64)>>,
}

thread_local! {
    static IMPORTS: LaneTab = LaneTab::default();
    /// How many import sections were built: the newest is the one shown.
    static SECTION: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Lane for Imports {
    type View = ImportView;
    const CREATE: &'static str = sfn::CreateImport::PATH;
    const STATUS: &'static str = sfn::ImportStatus::PATH;
    const CANCEL: &'static str = sfn::CancelImport::PATH;
    const NOT_FOUND: &'static str = "import-not-found";

    fn tab(self) -> &'static std::thread::LocalKey<LaneTab> {
        &IMPORTS
    }
    fn page(self) -> PageSignals {
        self.page
    }
    fn slot(self) -> Option<String> {
        client::slot(self.page, "import")
    }
    fn trouble(self) -> RwSignal<Option<Trouble>> {
        self.trouble
    }
    fn notice(self) -> RwSignal<Option<Notice>> {
        self.notice
    }
    fn id(view: &ImportView) -> &str {
        &view.id
    }
    fn is_terminal(view: &ImportView) -> bool {
        view.status.is_terminal()
    }
    fn shown_id(self) -> Option<String> {
        match self.state.try_get_untracked()? {
            ImportState::Known(v) => Some(v.id),
            _ => None,
        }
    }
    fn show(self, view: &ImportView) {
        self.state.set(ImportState::Known(Box::new(view.clone())));
    }
    fn pending(self, resuming: bool) {
        self.state.set(if resuming { ImportState::Resuming } else { ImportState::Submitting });
    }
    fn idle(self) {
        self.state.set(ImportState::Idle);
    }
    fn is_settled(self) -> bool {
        self.state.try_get_untracked().is_some_and(|s| s.is_settled())
    }
    fn rejected(self, p: &Problem) {
        // The upload expired or is not this user's: it cannot be sent again.
        if p.code == "upload-not-found" {
            self.chosen.set(None);
            self.forget_chosen();
        }
    }
    fn settled(self) {}
}

impl Imports {
    /// The slot of the chosen upload.
    fn chosen_slot(self) -> Option<String> {
        client::slot(self.page, "upload")
    }

    fn remember_chosen(self, chosen: &Chosen) {
        if let (Some(storage), Some(slot), Ok(text)) = (client::local_storage(), self.chosen_slot(), serde_json::to_string(chosen)) {
            let _ = storage.set_item(&slot, &text);
        }
    }

    fn forget_chosen(self) {
        if let (Some(storage), Some(slot)) = (client::local_storage(), self.chosen_slot()) {
            let _ = storage.remove_item(&slot);
        }
    }

    fn stored_chosen(self) -> Option<Chosen> {
        let text = client::local_storage()?.get_item(&self.chosen_slot()?).ok()??;
        serde_json::from_slice(text.as_bytes()).ok()
    }

    /// Whether "Check file" and "Import" may be clicked.
    fn may_send(self) -> bool {
        self.chosen.get().is_some() && self.uploading.get().is_none() && self.state.get().is_settled() && self.trouble.get().is_none()
    }

    /// "Check file" (`DryRun`) or "Import" (`Apply`) of the chosen upload.
    fn send(self, mode: ImportMode) {
        let Some(chosen) = self.chosen.get_untracked() else { return };
        let on_error = self.on_error.get_untracked();
        let request = ImportRequest { dataset: self.dataset.get_untracked(), upload: chosen.upload.upload, mode, on_error, max_errors: None, notify: None };
        client::click(self, serde_json::value::to_raw_value(&request).ok());
    }

    /// Uploads the file the user chose, showing its progress; once stored, it is the chosen one.
    fn upload(self, file: web_sys::File) {
        const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";
        let Ok(xhr) = web_sys::XmlHttpRequest::new() else { return };
        let name = file.name();
        // Declared by its name; the server reads which it is from its first bytes anyway.
        let is_workbook = name.to_ascii_lowercase().ends_with(".xlsx");
        self.notice.set(None);
        self.uploading.set(Some((0, file.size() as i64)));
        let on_progress = Closure::<dyn Fn(web_sys::ProgressEvent)>::new(move |ev: web_sys::ProgressEvent| {
            if ev.length_computable() {
                self.uploading.try_set(Some((ev.loaded() as i64, ev.total() as i64)));
            }
        });
        let answered = xhr.clone();
        let on_end = Closure::once(move |_: web_sys::ProgressEvent| {
            self.uploading.try_set(None);
            let status = answered.status().unwrap_or(0);
            let body = answered.response_text().ok().flatten().unwrap_or_default();
            if (200..300).contains(&status) {
                if let Ok(upload) = serde_json::from_slice::<UploadView>(body.as_bytes()) {
                    let chosen = Chosen { upload, name };
                    self.remember_chosen(&chosen);
                    self.chosen.try_set(Some(chosen));
                    return;
                }
            }
            let problem = serde_json::from_slice::<Problem>(body.as_bytes())
                .unwrap_or_else(|_| Problem::new(sfn::NETWORK, status, "The server could not be reached"));
            self.notice.try_set(Some(Notice::Refused(problem)));
        });
        if let Ok(target) = xhr.upload() {
            target.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
        }
        xhr.set_onloadend(Some(on_end.as_ref().unchecked_ref()));
        let sent = xhr.open_with_async("POST", "/api/uploads", true).is_ok()
            && xhr.set_request_header("content-type", if is_workbook { XLSX } else { "text/csv" }).is_ok()
            && xhr.send_with_opt_blob(Some(&file)).is_ok();
        if sent {
            // Each lives until the request ends: the browser calls them, not Rust.
            on_progress.forget();
            on_end.forget();
        } else {
            self.uploading.set(None);
        }
    }

    /// Follows the report's fresh link.
    fn download_report(self, id: String) {
        spawn_local(async move {
            match client::call_sfn::<String>(sfn::ReportLink::PATH, &sfn::ReportLink { id }).await {
                Ok(url) => {
                    if let Some(w) = web_sys::window() {
                        let _ = w.location().assign(&url);
                    }
                }
                Err(p) => {
                    self.notice.try_set(Some(Notice::DownloadRefused(p)));
                }
            }
        });
    }
}

/// A problem's text for the import section: the import's own codes, then the page's.
fn import_problem(i18n: I18n, p: &Problem) -> String {
    let text = match p.code.as_str() {
        "upload-not-found" => td_string!(i18n.get_locale(), problem_upload_not_found),
        "import-not-permitted" => td_string!(i18n.get_locale(), problem_import_not_permitted),
        "import-not-found" => td_string!(i18n.get_locale(), problem_import_not_found),
        "unsupported-media-type" => td_string!(i18n.get_locale(), problem_unsupported_type),
        "body-too-large" => td_string!(i18n.get_locale(), problem_too_large),
        _ => return problem_text(i18n, p),
    };
    text.to_string()
}

/// Why an import failed, in the page's language when its code is a known one.
fn import_failure(i18n: I18n, code: &str, message: &str) -> String {
    match code {
        "invalid_file" => td_string!(i18n.get_locale(), failure_invalid_file).to_string(),
        "validation_failed" => td_string!(i18n.get_locale(), failure_validation_failed).to_string(),
        "apply_failed" => td_string!(i18n.get_locale(), failure_apply_failed).to_string(),
        "permission_revoked" => td_string!(i18n.get_locale(), failure_import_revoked).to_string(),
        "storage_unavailable" => td_string!(i18n.get_locale(), failure_storage_unavailable).to_string(),
        "worker_lost" => td_string!(i18n.get_locale(), failure_worker_lost).to_string(),
        "no_worker" => td_string!(i18n.get_locale(), failure_no_worker).to_string(),
        "stalled" => td_string!(i18n.get_locale(), failure_stalled).to_string(),
        "internal" => td_string!(i18n.get_locale(), failure_internal).to_string(),
        _ => message.to_owned(),
    }
}

/// The sentence that explains the import's state.
fn describe(i18n: I18n, state: &ImportState) -> String {
    let v = match state {
        ImportState::Idle => return td_string!(i18n.get_locale(), import_state_idle).to_string(),
        ImportState::Submitting => return td_string!(i18n.get_locale(), import_state_submitting).to_string(),
        ImportState::Resuming => return td_string!(i18n.get_locale(), import_state_resuming).to_string(),
        ImportState::Known(v) => v,
    };
    let total = |t: Option<i64>| t.map_or_else(|| "…".to_owned(), |t| number(i18n, t));
    match v.status {
        ExportStatus::Queued => td_string!(i18n.get_locale(), import_state_queued).to_string(),
        ExportStatus::Running if v.phase.as_deref() == Some("applying") => {
            td_string!(i18n.get_locale(), import_state_applying, done = number(i18n, v.progress.rows_done), total = total(v.progress.rows_total)).to_string()
        }
        ExportStatus::Running => td_string!(i18n.get_locale(), import_state_validating, done = number(i18n, v.progress.rows_done), total = total(v.progress.rows_total)).to_string(),
        ExportStatus::RetryWait => td_string!(i18n.get_locale(), import_state_retry, attempt = number(i18n, i64::from(v.attempt))).to_string(),
        ExportStatus::CancelRequested => td_string!(i18n.get_locale(), import_state_cancel_requested).to_string(),
        ExportStatus::Cancelled => td_string!(i18n.get_locale(), import_state_cancelled).to_string(),
        ExportStatus::Ready if v.mode == ImportMode::DryRun => {
            td_string!(i18n.get_locale(), import_state_checked, valid = number(i18n, v.counts.valid), rows = number(i18n, v.counts.rows)).to_string()
        }
        ExportStatus::Ready => td_string!(i18n.get_locale(), import_state_imported, applied = number(i18n, v.counts.applied)).to_string(),
        ExportStatus::Failed => {
            let reason = v.error.as_ref().map(|e| import_failure(i18n, &e.code, &e.message)).unwrap_or_default();
            td_string!(i18n.get_locale(), import_state_failed, reason = reason).to_string()
        }
    }
}

/// What a screen reader is told when the state changes: no numbers, so a poll says nothing again.
fn announcement(i18n: I18n, state: &ImportState) -> String {
    match state {
        ImportState::Idle => String::new(),
        ImportState::Known(v) => match v.status {
            ExportStatus::Running => td_string!(i18n.get_locale(), import_announce_running).to_string(),
            ExportStatus::Ready if v.mode == ImportMode::DryRun => td_string!(i18n.get_locale(), import_announce_checked).to_string(),
            ExportStatus::Ready => td_string!(i18n.get_locale(), import_announce_imported).to_string(),
            ExportStatus::RetryWait => td_string!(i18n.get_locale(), import_state_retry, attempt = "").to_string(),
            _ => describe(i18n, state),
        },
        other => describe(i18n, other),
    }
}

/// The import section, built once its wasm file is loaded.
#[leptos::lazy]
pub fn section(i18n: I18n, page: PageSignals) -> AnyView {
    let lane = Imports {
        page,
        state: RwSignal::new(ImportState::Idle),
        trouble: RwSignal::new(None),
        notice: RwSignal::new(None),
        dataset: RwSignal::new(crate::page_catalog().datasets.first().map(|d| d.name.clone()).unwrap_or_default()),
        on_error: RwSignal::new(OnError::Abort),
        chosen: RwSignal::new(None),
        uploading: RwSignal::new(None),
    };
    if let Some(chosen) = lane.stored_chosen() {
        lane.chosen.set(Some(chosen));
    }
    // The section is built again whenever the signed-in branch is (a sign-in, a role learned
    // again); only the newest one follows the other tabs and drives, and only its going (a
    // sign-out) stops them.
    let mine = SECTION.with(|n| {
        n.set(n.get().wrapping_add(1));
        n.get()
    });
    // Follows what other tabs do with this user's import intent, and resumes the stored one (a
    // reload, a sign-in): no new POST, no file to choose again.
    client::follow_other_tabs(Some(std::rc::Rc::new(move |changed: Option<String>| {
        if changed.is_none() || changed == lane.slot() {
            client::follow_stored(lane);
        }
    })));
    spawn_local(client::resume(lane));
    on_cleanup(move || {
        if SECTION.with(|n| n.get()) == mine {
            client::follow_other_tabs(None);
            client::stop_all(lane);
        }
    });
    view(i18n, lane).into_any()
}

fn view(i18n: I18n, lane: Imports) -> impl IntoView {
    let state = lane.state;
    let on_file = move |ev: leptos::ev::Event| {
        let input = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok());
        if let Some(file) = input.and_then(|i| i.files()).and_then(|files| files.get(0)) {
            lane.upload(file);
        }
    };
    let on_error_choice = move |value: OnError, label: fn(I18n) -> String| {
        let name = if value == OnError::Abort { "abort" } else { "skip_invalid" };
        view! {
            <label class="check">
                <input type="radio" name="on_error" value=name
                    prop:checked=move || lane.on_error.get() == value
                    on:change=move |_| lane.on_error.set(value)/>
                {move || label(i18n)}
            </label>
        }
    };
    view! {
        <section class="card imports" aria-labelledby="import-heading" data-testid="imports">
            <h2 id="import-heading">{move || td_string!(i18n.get_locale(), import_heading)}</h2>
            <form on:submit=|ev| ev.prevent_default()>
                <label>{move || td_string!(i18n.get_locale(), dataset)}
                    <select name="dataset" data-testid="import-dataset" prop:value=move || lane.dataset.get()
                        on:change=move |ev| lane.dataset.set(event_target_value(&ev))>
                        {crate::page_catalog().datasets.into_iter().map(|d| {
                            let value = d.name.clone();
                            view! { <option value=value>{move || d.title(leptos_i18n::Locale::as_str(i18n.get_locale())).to_owned()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>{move || td_string!(i18n.get_locale(), import_file)}
                    <input type="file" name="file" accept=".csv,text/csv,.xlsx,application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" data-testid="import-file" on:change=on_file
                        disabled=move || lane.uploading.get().is_some()/>
                </label>
                {move || lane.uploading.get().map(|(sent, total)| view! {
                    <div class="progress">
                        <progress data-testid="upload-progress" max=total.max(1) value=sent></progress>
                        <span>{move || td_string!(i18n.get_locale(), upload_progress, sent = human_bytes(i18n, sent), total = human_bytes(i18n, total)).to_string()}</span>
                    </div>
                })}
                {move || lane.chosen.get().map(|c| view! {
                    <p class="note" data-testid="upload-chosen" data-upload=c.upload.upload.clone()>
                        {move || td_string!(i18n.get_locale(), upload_chosen, name = c.name.clone(), size = human_bytes(i18n, c.upload.bytes)).to_string()}
                    </p>
                })}
                <fieldset class="on-error">
                    <legend>{move || td_string!(i18n.get_locale(), on_error)}</legend>
                    {on_error_choice(OnError::Abort, |i18n| td_string!(i18n.get_locale(), on_error_abort).to_string())}
                    {on_error_choice(OnError::SkipInvalid, |i18n| td_string!(i18n.get_locale(), on_error_skip).to_string())}
                </fieldset>
                <button type="button" data-testid="check-file" disabled=move || !lane.may_send() on:click=move |_| lane.send(ImportMode::DryRun)>
                    {move || td_string!(i18n.get_locale(), check_file)}
                </button>
                " "
                <button type="button" data-testid="import-apply" disabled=move || !lane.may_send() on:click=move |_| lane.send(ImportMode::Apply)>
                    {move || td_string!(i18n.get_locale(), import_apply)}
                </button>
            </form>
            {move || lane.notice.get().map(|n| {
                let text = match &n {
                    Notice::Refused(p) | Notice::DownloadRefused(p) => import_problem(i18n, p),
                    Notice::CannotStore => td_string!(i18n.get_locale(), notice_cannot_store).to_string(),
                    _ => String::new(),
                };
                view! { <p class="notice" role="alert" data-testid="import-notice">{text}</p> }
            })}
            <p class="announce" role="status" aria-live="polite" data-testid="import-announce">{move || announcement(i18n, &state.get())}</p>
            <div class="status" data-testid="import-status" data-state=move || state.get().name()
                data-phase=move || match state.get() { ImportState::Known(v) => v.phase.unwrap_or_default(), _ => String::new() }
                data-op=move || match state.get() { ImportState::Known(v) => v.id, _ => String::new() }>
                {move || describe(i18n, &state.get())}
            </div>
            {move || match state.get() {
                ImportState::Known(v) => Some(known(i18n, lane, *v)),
                _ => None,
            }}
            {move || lane.trouble.get().map(|t| view! {
                <div class="trouble" role="alert" data-testid="import-trouble">
                    <p>{match &t {
                        Trouble::Refused(p) => import_problem(i18n, p),
                        Trouble::Unanswered => td_string!(i18n.get_locale(), trouble_unanswered).to_string(),
                        Trouble::OtherTab => td_string!(i18n.get_locale(), trouble_other_tab).to_string(),
                    }}</p>
                    <button type="button" data-testid="import-try-again" on:click=move |_| client::try_again(lane)>{move || td_string!(i18n.get_locale(), try_again)}</button>
                    " "
                    <button type="button" class="secondary" data-testid="import-discard" on:click=move |_| client::discard(lane)>{move || td_string!(i18n.get_locale(), discard)}</button>
                </div>
            })}
        </section>
    }
}

/// What a known import shows beside its sentence: progress, counts, first errors, the report and
/// Cancel.
fn known(i18n: I18n, lane: Imports, v: ImportView) -> AnyView {
    let running = v.status == ExportStatus::Running;
    let cancellable = matches!(v.status, ExportStatus::Queued | ExportStatus::Running | ExportStatus::RetryWait);
    let counted = v.counts.rows > 0 || v.status.is_terminal();
    let c = v.counts;
    let count = move |name: &'static str, label: fn(I18n) -> String, n: i64| {
        view! { <tr><th>{move || label(i18n)}</th><td data-testid="import-count" data-count=name data-value=n>{move || number(i18n, n)}</td></tr> }
    };
    let report = v.report.as_ref().filter(|r| !r.expired && v.status.is_terminal()).map(|r| {
        let id = v.id.clone();
        let expires = r.expires_at.clone();
        view! {
            <p>
                <button type="button" data-testid="report-download" on:click=move |_| lane.download_report(id.clone())>{move || td_string!(i18n.get_locale(), report_download)}</button>
                " " <small>{move || td_string!(i18n.get_locale(), report_until, date = date_time(i18n, &expires)).to_string()}</small>
            </p>
        }
    });
    let errors = (!v.first_errors.is_empty()).then(|| {
        let rows = v.first_errors.into_iter().map(|e| {
            let (line, code, column) = (e.line, e.code.clone(), e.column.clone());
            view! {
                <tr data-testid="first-error" data-line=line data-code=code data-column=column>
                    <td>{move || number(i18n, line)}</td><td><bdi>{e.column}</bdi></td><td><code>{e.code}</code></td><td><bdi>{e.message}</bdi></td>
                </tr>
            }
        }).collect_view();
        view! {
            <h3>{move || td_string!(i18n.get_locale(), first_errors)}</h3>
            <table class="recent" data-testid="first-errors">
                <thead><tr><th>{move || td_string!(i18n.get_locale(), col_line)}</th><th>{move || td_string!(i18n.get_locale(), col_column)}</th><th>{move || td_string!(i18n.get_locale(), col_code)}</th><th>{move || td_string!(i18n.get_locale(), col_message)}</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
    });
    view! {
        {running.then(|| view! {
            <progress data-testid="import-progress" max=v.progress.rows_total.map(|t| t.max(1)) value=v.progress.rows_total.map(|_| v.progress.rows_done)></progress>
        })}
        {counted.then(|| view! {
            <table class="counts" data-testid="import-counts">
                {count("rows", |i| td_string!(i.get_locale(), count_rows).to_string(), c.rows)}
                {count("valid", |i| td_string!(i.get_locale(), count_valid).to_string(), c.valid)}
                {count("invalid", |i| td_string!(i.get_locale(), count_invalid).to_string(), c.invalid)}
                {count("created", |i| td_string!(i.get_locale(), count_created).to_string(), c.created)}
                {count("updated", |i| td_string!(i.get_locale(), count_updated).to_string(), c.updated)}
                {count("unchanged", |i| td_string!(i.get_locale(), count_unchanged).to_string(), c.unchanged)}
                {count("applied", |i| td_string!(i.get_locale(), count_applied).to_string(), c.applied)}
            </table>
        })}
        {errors}
        {report}
        {cancellable.then(|| view! {
            <button type="button" class="secondary" data-testid="import-cancel" on:click=move |_| client::cancel(lane)>{move || td_string!(i18n.get_locale(), cancel)}</button>
        })}
    }
    .into_any()
}
