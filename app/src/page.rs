//! The export page (SPEC §7): sign in, fill the export form, follow the operation through every
//! state, cancel, download, retry, and see recent exports.
//!
//! Everything that touches the network or localStorage runs only in the browser (`client`); the
//! server renders the same "loading" first state the browser starts from, so hydration matches.

use crate::i18n::*;
use crate::model::{ExportState, ExportView, PartView, ProblemField};
use leptos::prelude::*;

use crate::format::*;
use crate::page_state::*;

fn field_error(errors: RwSignal<Vec<ProblemField>>, pointer: impl Into<String>, name: impl Into<String>) -> impl IntoView {
    let (pointer, name) = (pointer.into(), name.into());
    move || {
        errors.get().into_iter().find(|e| e.pointer == pointer || e.pointer.starts_with(&format!("{pointer}/"))).map(|e| {
            view! { <span class="field-error" id=format!("error-{name}") data-testid=format!("error-{name}") role="alert">{e.detail}</span> }
        })
    }
}

/// The pointers the form shows beside a field (and every filter's, under `/filters/`); any other
/// goes above the form.
const FIELD_POINTERS: [&str; 5] = ["/report", "/time_range/from", "/time_range/to", "/timezone", "/filters"];

/// A filter's label: the page's own words for the demo's filters, else its name.
fn filter_label(i18n: crate::language::I18n, name: &str) -> String {
    match name {
        "status" => td_string!(i18n.get_locale(), status_filter).to_string(),
        "country" => td_string!(i18n.get_locale(), countries).to_string(),
        "min_total" => td_string!(i18n.get_locale(), min_total).to_string(),
        "max_total" => td_string!(i18n.get_locale(), max_total).to_string(),
        other => other.replace('_', " "),
    }
}

/// The fields of one filter of the chosen report.
fn filter_field(i18n: crate::language::I18n, f: FormSignals, filter: crate::model::PageFilter) -> impl IntoView {
    let name = filter.name.clone();
    let label = { let name = name.clone(); move || filter_label(i18n, &name) };
    let pointer = format!("/filters/{name}");
    if filter.test == "one_of" {
        let boxes = filter.values.iter().map(|value| {
            let (value, name, on_name) = (value.clone(), name.clone(), name.clone());
            let (shown, checked_value, on_value) = (value.clone(), value.clone(), value.clone());
            view! {
                <label class="check">
                    <input type="checkbox" name=name.clone() value=value.clone()
                        prop:checked=move || f.chosen.get().get(&name).is_some_and(|v| v.iter().any(|x| *x == checked_value))
                        on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            f.chosen.update(|chosen| {
                                let values = chosen.entry(on_name.clone()).or_default();
                                values.retain(|x| *x != on_value);
                                if on { values.push(on_value.clone()); }
                            });
                        }/>
                    {move || order_status_label(i18n, &shown)}
                </label>
            }
        }).collect_view();
        return view! {
            <div class="statuses" role="group" aria-label=label>
                {boxes}
                {field_error(f.errors, pointer, name.clone())}
            </div>
        }.into_any();
    }
    let (input_type, step) = match filter.of.as_deref() {
        Some("money" | "decimal") => ("number", Some("0.01")),
        Some("integer") => ("number", Some("1")),
        Some("date") => ("date", None),
        _ => ("text", None),
    };
    let (value_name, input_name) = (name.clone(), name.clone());
    if filter.of.as_deref() == Some("boolean") {
        return view! {
            <label>{label}
                <select name=input_name prop:value=move || f.filters.get().get(&value_name).cloned().unwrap_or_default()
                    on:change={ let name = name.clone(); move |ev| f.filters.update(|v| { v.insert(name.clone(), event_target_value(&ev)); }) }>
                    <option value="">"—"</option>
                    <option value="true">"true"</option>
                    <option value="false">"false"</option>
                </select>
                {field_error(f.errors, pointer, name.clone())}
            </label>
        }.into_any();
    }
    view! {
        <label>{label}
            <input type=input_type name=input_name step=step prop:value=move || f.filters.get().get(&value_name).cloned().unwrap_or_default()
                on:input={ let name = name.clone(); move |ev| f.filters.update(|v| { v.insert(name.clone(), event_target_value(&ev)); }) }/>
            {field_error(f.errors, pointer, name.clone())}
        </label>
    }.into_any()
}

/// The one page of the app.
#[component]
pub fn ExportPage() -> impl IntoView {
    let i18n = crate::language::use_language();
    let catalog = StoredValue::new(crate::page_catalog());
    let form = FormSignals {
        report: RwSignal::new(catalog.with_value(|c| c.reports.first().map(|r| r.titled.name.clone()).unwrap_or_default())),
        range: RwSignal::new("last_7_days".to_owned()),
        from: RwSignal::new(String::new()),
        to: RwSignal::new(String::new()),
        timezone: RwSignal::new("UTC".to_owned()),
        filters: RwSignal::new(Default::default()),
        chosen: RwSignal::new(Default::default()),
        xlsx: RwSignal::new(false),
        bom: RwSignal::new(false),
        checkpointed: RwSignal::new(false),
        gzip: RwSignal::new(false),
        errors: RwSignal::new(Vec::new()),
    };
    let s = PageSignals {
        session: RwSignal::new(SessionState::Unknown),
        state: RwSignal::new(ExportState::Idle),
        op_id: RwSignal::new(None),
        rows_per_sec: RwSignal::new(None),
        retry_in: RwSignal::new(None),
        notice: RwSignal::new(None),
        trouble: RwSignal::new(None),
        form,
        recent: RwSignal::new(Vec::new()),
        next_cursor: RwSignal::new(None),
    };

    #[cfg(feature = "hydrate")]
    Effect::new(move |_| crate::client::start(s));

    let email = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());

    let on_login = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        #[cfg(feature = "hydrate")]
        crate::client::login(s, email.get_untracked(), password.get_untracked());
        #[cfg(not(feature = "hydrate"))]
        let _ = (email, password);
    };
    let on_export = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        #[cfg(feature = "hydrate")]
        crate::client::export(s);
    };
    let on_logout = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::logout(s);
    };
    let on_cancel = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::cancel(crate::client::Exports(s));
    };
    let on_download = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(id) = s.op_id.get_untracked() {
            crate::client::download(s, id, None);
        }
    };
    let on_retry = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::retry(s);
    };
    let on_try_again = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::try_again(crate::client::Exports(s));
    };
    let on_discard = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::discard(crate::client::Exports(s));
    };
    let on_more = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::load_recent(s, true);
    };

    let login_form = move || {
        view! {
            <form class="card" on:submit=on_login data-testid="login-form">
                <h2>{move || td_string!(i18n.get_locale(), sign_in)}</h2>
                <label>{move || td_string!(i18n.get_locale(), email)}
                    <input type="email" name="email" autocomplete="username" required=true
                        prop:value=move || email.get()
                        on:input=move |ev| email.set(event_target_value(&ev))/>
                </label>
                <label>{move || td_string!(i18n.get_locale(), password)}
                    <input type="password" name="password" autocomplete="current-password" required=true
                        prop:value=move || password.get()
                        on:input=move |ev| password.set(event_target_value(&ev))/>
                </label>
                <button type="submit" data-testid="sign-in">{move || td_string!(i18n.get_locale(), sign_in)}</button>
                {catalog.with_value(|c| c.sign_in_with.clone()).map(|name| {
                    let out_of = name.clone();
                    view! {
                        // Plain links: sign-in through the provider works before the page's script runs.
                        <p class="provider">
                            <a class="button" href="/auth/oidc/start" data-testid="sign-in-with-provider">{move || td_string!(i18n.get_locale(), sign_in_with, name = name.clone()).to_string()}</a>
                            " "
                            <a href="/auth/oidc/sign-out" data-testid="provider-sign-out">{move || td_string!(i18n.get_locale(), sign_out_of_provider, name = out_of.clone()).to_string()}</a>
                        </p>
                    }
                })}
            </form>
        }
    };

    let form_view = move || {
        let f = s.form;
        let general_errors = move || {
            f.errors.get().into_iter().filter(|e| !FIELD_POINTERS.iter().any(|p| e.pointer == *p || e.pointer.starts_with(&format!("{p}/")))).map(|e| {
                view! { <li>{if e.pointer.is_empty() { e.detail } else { format!("{}: {}", e.pointer, e.detail) }}</li> }
            }).collect_view()
        };
        view! {
            <form class="card export-form" on:submit=on_export data-testid="export-form" novalidate=true>
                <h2>{move || td_string!(i18n.get_locale(), export_heading)}</h2>
                <ul class="field-errors" data-testid="form-errors">{general_errors}</ul>
                <div class="row">
                    <label>{move || td_string!(i18n.get_locale(), report)}
                        <select name="report" prop:value=move || f.report.get()
                            on:change=move |ev| f.report.set(event_target_value(&ev))>
                            {catalog.with_value(|c| c.reports.iter().map(|r| {
                                let (titled, value) = (r.titled.clone(), r.titled.name.clone());
                                view! { <option value=value>{move || titled.title(leptos_i18n::Locale::as_str(i18n.get_locale())).to_owned()}</option> }
                            }).collect_view())}
                        </select>
                        {field_error(f.errors, "/report", "report")}
                    </label>
                    <label>{move || td_string!(i18n.get_locale(), range)}
                        <select name="range" prop:value=move || f.range.get()
                            on:change=move |ev| f.range.set(event_target_value(&ev))>
                            {RANGES.iter().map(|value| view! { <option value=*value>{move || range_label(i18n, value)}</option> }).collect_view()}
                        </select>
                    </label>
                </div>
                {move || (f.range.get() == "custom").then(|| view! {
                    <div class="row">
                        <label>{move || td_string!(i18n.get_locale(), from)}
                            <input type="date" name="from" prop:value=move || f.from.get()
                                aria-describedby="error-from"
                                on:input=move |ev| f.from.set(event_target_value(&ev))/>
                            {field_error(f.errors, "/time_range/from", "from")}
                        </label>
                        <label>{move || td_string!(i18n.get_locale(), to)}
                            <input type="date" name="to" prop:value=move || f.to.get()
                                aria-describedby="error-to"
                                on:input=move |ev| f.to.set(event_target_value(&ev))/>
                            {field_error(f.errors, "/time_range/to", "to")}
                        </label>
                    </div>
                })}
                <label>{move || td_string!(i18n.get_locale(), timezone)}
                    <input type="text" name="timezone" prop:value=move || f.timezone.get()
                        aria-describedby="error-timezone"
                        on:input=move |ev| f.timezone.set(event_target_value(&ev))/>
                    {field_error(f.errors, "/timezone", "timezone")}
                </label>
                <fieldset class="filters">
                    <legend>{move || td_string!(i18n.get_locale(), filters)}</legend>
                    {move || {
                        let report = f.report.get();
                        catalog.with_value(|c| c.reports.iter().find(|r| r.titled.name == report).map(|r| r.filters.clone()).unwrap_or_default())
                            .into_iter()
                            .map(|filter| filter_field(i18n, f, filter))
                            .collect_view()
                    }}
                </fieldset>
                <label>{move || td_string!(i18n.get_locale(), file_format)}
                    <select name="format" aria-describedby="error-format" on:change=move |ev| f.xlsx.set(event_target_value(&ev) == "xlsx")>
                        <option value="csv" selected=move || !f.xlsx.get()>"CSV"</option>
                        <option value="xlsx" selected=move || f.xlsx.get()>{move || td_string!(i18n.get_locale(), format_xlsx)}</option>
                    </select>
                    {field_error(f.errors, "/format", "format")}
                </label>
                <div class="options">
                <label class="check">
                    <input type="checkbox" name="bom" prop:checked=move || f.bom.get() prop:disabled=move || f.xlsx.get()
                        on:change=move |ev| f.bom.set(event_target_checked(&ev))/>
                    {move || td_string!(i18n.get_locale(), bom)}
                </label>
                <label class="check">
                    <input type="checkbox" name="consistency" value="checkpointed" prop:checked=move || f.checkpointed.get()
                        on:change=move |ev| f.checkpointed.set(event_target_checked(&ev))/>
                    {move || td_string!(i18n.get_locale(), checkpointed)}
                </label>
                <label class="check">
                    <input type="checkbox" name="compression" value="gzip" prop:checked=move || f.gzip.get() prop:disabled=move || f.xlsx.get()
                        on:change=move |ev| f.gzip.set(event_target_checked(&ev))/>
                    {move || td_string!(i18n.get_locale(), gzip)}
                </label>
                </div>
                <button type="submit" data-testid="export" disabled=move || !s.state.get().is_settled() || s.trouble.get().is_some() || !s.session.get().may_export()>{move || td_string!(i18n.get_locale(), export)}</button>
                {move || (matches!(s.session.get(), SessionState::SignedIn(_)) && !s.session.get().may_export())
                    .then(|| view! { <p class="note" data-testid="viewer-note">{move || td_string!(i18n.get_locale(), viewer_note)}</p> })}
            </form>
        }
    };

    let status_view = move || {
        let state = s.state;
        view! {
            <section class="card" aria-labelledby="status-heading">
                <h2 id="status-heading">{move || td_string!(i18n.get_locale(), current_export)}</h2>
                // The live region announces changes of state only; the status itself (its rows,
                // countdown and size) is read when the user goes to it. A text node is written
                // only when its text changes, so a poll that changes numbers alone says nothing.
                <p class="announce" role="status" aria-live="polite" data-testid="announce">{move || announcement(i18n, &s.state.get())}</p>
                <div class="status" data-testid="status" data-state=move || state.get().name()
                    data-op=move || s.op_id.get().unwrap_or_default()>
                    {move || describe(i18n, &state.get(), s.retry_in.get())}
                </div>
                {move || match state.get() {
                    ExportState::Running { rows_written, rows_total, parts_done, parts_expected } => Some(view! {
                        <div class="progress">
                            // Without a total the bar has no value: indeterminate, not full.
                            <progress data-testid="progress" max=rows_total.map(|t| t.max(1)) value=rows_total.map(|_| rows_written)
                                aria-label=move || td_string!(i18n.get_locale(), rows_written_label).to_string()></progress>
                            <span data-testid="rate">{move || s.rows_per_sec.get().map(|r| td_string!(i18n.get_locale(), rows_per_sec, rate = number(i18n, r)).to_string()).unwrap_or_default()}</span>
                            {parts_done.map(|done| view! {
                                <span data-testid="parts-progress" data-done=done data-expected=parts_expected.unwrap_or_default()>{move || match parts_expected {
                                    Some(expected) => td_string!(i18n.get_locale(), parts_progress_total, done = number(i18n, done), expected = number(i18n, expected)).to_string(),
                                    None => td_string!(i18n.get_locale(), parts_progress, done = number(i18n, done)).to_string(),
                                }}</span>
                            })}
                        </div>
                    }.into_any()),
                    ExportState::Ready { sha256, parts, .. } => Some({
                        let may = s.session.get().may_export();
                        let one_file = parts.is_empty();
                        view! {
                            <p class="digest">{move || td_string!(i18n.get_locale(), digest)} " " <code data-testid="sha256">{sha256}</code></p>
                            {may.then(|| view! {
                                <button type="button" data-testid="download" on:click=on_download>
                                    {move || if one_file { td_string!(i18n.get_locale(), download) } else { td_string!(i18n.get_locale(), download_bundle) }}
                                </button>
                            })}
                            {(may && !parts.is_empty()).then(|| parts_view(i18n, s, parts))}
                        }
                    }.into_any()),
                    ExportState::Failed { code, support_ref, retryable, .. } => Some(view! {
                        <p class="reason">{move || td_string!(i18n.get_locale(), reason)} " " <code data-testid="failure-code">{code}</code>
                            {support_ref.map(|r| view! { " · " {move || td_string!(i18n.get_locale(), support_ref)} " " <code data-testid="support-ref">{r}</code> })}
                        </p>
                        {retryable.then(|| view! { <button type="button" data-testid="retry" on:click=on_retry>{move || td_string!(i18n.get_locale(), retry)}</button> })}
                    }.into_any()),
                    _ => None,
                }}
                {move || s.trouble.get().map(|t| view! {
                    <div class="trouble" role="alert" data-testid="trouble">
                        <p>{trouble_text(i18n, &t)}</p>
                        <button type="button" data-testid="try-again" on:click=on_try_again>{move || td_string!(i18n.get_locale(), try_again)}</button>
                        " "
                        <button type="button" class="secondary" data-testid="discard" on:click=on_discard>{move || td_string!(i18n.get_locale(), discard)}</button>
                    </div>
                })}
                {move || (state.get().is_cancellable()).then(|| view! {
                    <button type="button" class="secondary" data-testid="cancel" on:click=on_cancel>{move || td_string!(i18n.get_locale(), cancel)}</button>
                })}
            </section>
        }
    };

    let recent_view = move || {
        view! {
            <section class="card" aria-labelledby="recent-heading">
                <h2 id="recent-heading">{move || td_string!(i18n.get_locale(), recent)}</h2>
                <table class="recent" data-testid="recent">
                    <thead><tr><th>{move || td_string!(i18n.get_locale(), col_status)}</th><th>{move || td_string!(i18n.get_locale(), col_range)}</th><th>{move || td_string!(i18n.get_locale(), col_rows)}</th><th>{move || td_string!(i18n.get_locale(), col_created)}</th><th></th></tr></thead>
                    <tbody>
                        // Rebuilt whole when the list changes (after an export settles, on More):
                        // a keyed list's diffing would cost more wasm than it saves here.
                        {move || s.recent.get().into_iter().map(|v| recent_row(i18n, s, v)).collect_view()}
                    </tbody>
                </table>
                {move || (s.next_cursor.get().is_some()).then(|| view! {
                    <button type="button" class="secondary" data-testid="more" on:click=on_more>{move || td_string!(i18n.get_locale(), more)}</button>
                })}
            </section>
        }
    };

    view! {
        <header class="top">
            <h1>"exportd"</h1>
            // The switch names the other language in that language, so it says which it is.
            <button type="button" class="link" data-testid="language"
                lang=move || if i18n.get_locale() == Locale::en { "ar" } else { "en" }
                on:click=move |_| {
                    let next = if i18n.get_locale() == Locale::en { Locale::ar } else { Locale::en };
                    i18n.set_locale(next);
                    #[cfg(feature = "hydrate")]
                    crate::client::remember_locale(next.as_str());
                }>
                {move || td_string!(i18n.get_locale(), language_switch)}
            </button>
            {move || match s.session.get() {
                SessionState::SignedIn(who) => Some(view! {
                    // An address and a slug keep their own direction inside right-to-left text.
                    <p class="who">
                        <strong><bdi data-testid="who">{who.email.clone()}</bdi></strong>
                        " (" <span data-testid="role">{role_label(i18n, &who.role)}</span> ", " <bdi>{who.tenant.clone()}</bdi> ") "
                        <button class="link" data-testid="sign-out" on:click=on_logout>{move || td_string!(i18n.get_locale(), sign_out)}</button>
                    </p>
                }),
                _ => None,
            }}
        </header>
        {move || s.notice.get().map(|n| view! { <p class="notice" role="alert" data-testid="notice">{notice_text(i18n, &n)}</p> })}
        {move || match s.session.get() {
            SessionState::Unknown => view! { <p data-testid="loading">{move || td_string!(i18n.get_locale(), loading)}</p> }.into_any(),
            SessionState::SignedOut => login_form().into_any(),
            SessionState::SignedIn(_) => view! { {form_view()} {status_view()} {recent_view()} {imports_view(i18n, s)} }.into_any(),
        }}
    }
}

/// The ids of the elements the import and schedules sections are mounted into.
#[cfg(feature = "hydrate")]
const SECTION_SLOT: &str = "import-section";
#[cfg(feature = "hydrate")]
const SCHEDULE_SLOT: &str = "schedule-section";

#[cfg(feature = "hydrate")]
thread_local! {
    /// The number of the newest branch that shows the admin's sections, and the roots it mounted.
    static SECTION_ROOT: std::cell::RefCell<(u64, Vec<Box<dyn std::any::Any>>)> = const { std::cell::RefCell::new((0, Vec::new())) };
}

/// The import and schedules sections, for admins: loaded from their own wasm files after the
/// page, in the browser only (the server renders the page signed out, before anyone is known).
fn imports_view(i18n: I18n, s: PageSignals) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    return s.session.get_untracked().may_import().then(|| {
        use wasm_bindgen::JsCast;
        // The section is mounted in its own root once its wasm file is loaded, and unmounted
        // with this branch (a sign-out, a role learned again). Each branch takes a number: a
        // branch gone before the file arrived, or replaced by a newer one, mounts nothing, and
        // its cleanup drops only its own root. (By id and a thread-local rather than a NodeRef
        // and a stored value: 1,450 bytes less of the page's gzipped wasm.)
        let mine = SECTION_ROOT.with(|r| {
            let mut r = r.borrow_mut();
            r.0 = r.0.wrapping_add(1);
            r.0
        });
        on_cleanup(move || {
            let gone = SECTION_ROOT.with(|r| {
                let mut r = r.borrow_mut();
                if r.0 != mine {
                    return Vec::new();
                }
                r.0 = r.0.wrapping_add(1);
                std::mem::take(&mut r.1)
            });
            drop(gone);
        });
        leptos::task::spawn_local(async move {
            let section = crate::imports::section(i18n, s).await;
            if SECTION_ROOT.with(|r| r.borrow().0) != mine {
                return;
            }
            let mount = |id: &str, section: AnyView| {
                if let Some(div) = document().get_element_by_id(id).and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok()) {
                    let handle = leptos::mount::mount_to(div, move || section);
                    SECTION_ROOT.with(|r| r.borrow_mut().1.push(Box::new(handle)));
                }
            };
            mount(SECTION_SLOT, section);
            let schedules = crate::schedule_section::section(i18n, s).await;
            if SECTION_ROOT.with(|r| r.borrow().0) != mine {
                return;
            }
            mount(SCHEDULE_SLOT, schedules);
        });
        view! { <div id=SECTION_SLOT></div> <div id=SCHEDULE_SLOT></div> }
    });
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (i18n, s);
    }
}

/// A ready checkpointed export's parts, each with its own download.
fn parts_view(i18n: I18n, s: PageSignals, parts: Vec<PartView>) -> impl IntoView {
    view! {
        <details class="parts" data-testid="parts">
            <summary>{move || td_string!(i18n.get_locale(), parts_heading)}</summary>
            <ol>
                {parts.into_iter().map(|p| {
                    let index = p.index as i32;
                    let on_click = move |_| {
                        #[cfg(feature = "hydrate")]
                        if let Some(id) = s.op_id.get_untracked() {
                            crate::client::download(s, id, Some(index));
                        }
                        #[cfg(not(feature = "hydrate"))]
                        let _ = (&s, index);
                    };
                    view! {
                        <li>
                            <button type="button" class="link" data-testid="part-download" data-part=index on:click=on_click>
                                {move || td_string!(i18n.get_locale(), part_download, index = number(i18n, i64::from(index))).to_string()}
                            </button>
                            " " {move || td_string!(i18n.get_locale(), part_rows, rows = number(i18n, p.rows), size = human_bytes(i18n, p.bytes)).to_string()}
                        </li>
                    }
                }).collect_view()}
            </ol>
        </details>
    }
}

fn recent_row(i18n: I18n, s: PageSignals, v: ExportView) -> impl IntoView {
    let state = ExportState::from_view(&v);
    let range = range_days(&v.resolved);
    let rows = v.artifact.as_ref().map(|a| a.rows).unwrap_or(v.progress.rows_written);
    let created_at = v.created_at.clone();
    let status = v.status;
    let expired = matches!(state, ExportState::Expired);
    let id = v.id.clone();
    let may_download = matches!(state, ExportState::Ready { .. }) && s.session.get_untracked().may_export();
    let download = may_download.then(|| {
        let on_click = move |_| {
            #[cfg(feature = "hydrate")]
            crate::client::download(s, id.clone(), None);
            #[cfg(not(feature = "hydrate"))]
            let _ = (&s, &id);
        };
        view! { <button type="button" class="link" data-testid="recent-download" on:click=on_click>{move || td_string!(i18n.get_locale(), recent_download)}</button> }
    });
    let reason = match &state {
        ExportState::Failed { code, message, .. } => Some(failure_reason(i18n, code, message)),
        _ => None,
    };
    view! {
        <tr data-testid="recent-row" data-op=v.id.clone() data-state=state.name()>
            // A ready export whose file has expired is listed as expired, like the status shows it.
            <td>{move || if expired { td_string!(i18n.get_locale(), status_expired).to_string() } else { status_label(i18n, status) }}</td>
            <td>{range}</td>
            <td>{move || number(i18n, rows)}</td>
            <td>{move || date_time(i18n, &created_at)}</td>
            <td>{download}{reason.map(|r| view! { <span class="reason">{r}</span> })}</td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::number_json;
    use serde_json::json;

    #[test]
    fn a_number_field_is_sent_as_the_number_a_browser_accepts_and_anything_else_as_its_text() {
        assert_eq!(number_json(""), None);
        assert_eq!(number_json("  "), None);
        assert_eq!(number_json("12.5"), Some(json!(12.5)));
        assert_eq!(number_json(" .5 "), Some(json!(0.5)));
        assert_eq!(number_json("-.5"), Some(json!(-0.5)));
        assert_eq!(number_json("05"), Some(json!(5)));
        assert_eq!(number_json("00"), Some(json!(0)));
        assert_eq!(number_json("1e3"), Some(json!(1000.0)));
        assert_eq!(number_json("-"), Some(json!("-")));
        assert_eq!(number_json("abc"), Some(json!("abc")));
        assert_eq!(number_json("0x10"), Some(json!("0x10")));
        assert_eq!(number_json("1.2.3"), Some(json!("1.2.3")));
    }
}
