//! The import service (SPEC §10): creating an import (its key, its fingerprint over the upload's
//! digest, its checks in the order of SPEC §3.1), reading it, listing, cancelling, and the link
//! to its report. Jobs are created, listed and cancelled through the job store, the same way
//! as exports; only what an import means is here.

use super::stored::{last_mark, plan_of, report_status, request_of, resolved_of, Mark, Resolved};
use super::uploads::{ensure_may_import, find_own_and_touch};
use crate::auth::Actor;
use crate::clock::rfc3339;
use crate::entities::jobs;
use crate::error::{AppError, FieldError};
use crate::service::canonical::fingerprint;
use crate::service::context::ServiceContext;
use crate::service::key::IdempotencyKey;
use crate::service::owned::{cancel_own, counted, list_page, owner};
use crate::service::requests::typed_request;
use crate::job_store::intake::{self, Intake, NewJob};
use crate::job_store::kind::JobKind;
use crate::job_store::{audit, Mover};
use app::{DownloadView, ExportStatus, ImportCounts, ImportList, ImportMode, ImportProgress, ImportRequest, ImportView, OnError, ReportView, UploadRef};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde_json::Value;

/// What `create_import` did.
pub type CreateOutcome = crate::service::owned::CreateOutcome<ImportView>;

/// What `cancel_import` did.
pub type CancelOutcome = crate::service::owned::CancelOutcome<ImportView>;

/// The fingerprint of an import request: of the request with its defaults, the upload named by
/// its digest instead of its id (SPEC §10).
fn fingerprint_of(request: &ImportRequest, sha256: &str) -> Result<String, AppError> {
    let mut value = serde_json::to_value(request).map_err(|e| AppError::Internal(e.to_string()))?;
    if let Some(map) = value.as_object_mut() {
        map.insert("upload".into(), Value::String(format!("sha256:{sha256}")));
    }
    Ok(fingerprint(&value))
}

/// The rules of a request's fields beyond their shape: the dataset, and its schema version.
fn check(config: &crate::config::Config, request: &ImportRequest) -> Result<String, AppError> {
    let catalog = &config.catalog;
    let mut errors = crate::notifications::check(request.notify.as_ref(), config);
    let dataset = catalog.dataset(&request.dataset).map(crate::catalog::Dataset::digest);
    if dataset.is_none() {
        let names: Vec<&str> = catalog.datasets.iter().map(|d| d.name.as_str()).collect();
        errors.push(FieldError::new("/dataset", format!("one of {}", names.join(", "))));
    }
    if request.max_errors.is_some() && request.on_error != OnError::SkipInvalid {
        errors.push(FieldError::new("/max_errors", "only with on_error skip_invalid"));
    }
    match dataset {
        Some(d) if errors.is_empty() => Ok(d),
        _ => Err(AppError::InvalidRequest(errors)),
    }
}

/// Creates an import, or replays the one bound to `key`.
pub async fn create_import(state: &ServiceContext, actor: &Actor, key: &IdempotencyKey, raw: Value) -> Result<CreateOutcome, AppError> {
    counted(state, create_or_replay(state, actor, key.as_str(), raw).await)
}

async fn create_or_replay(state: &ServiceContext, actor: &Actor, key: &str, raw: Value) -> Result<CreateOutcome, AppError> {
    ensure_may_import(actor)?;
    let typed = typed_request::<ImportRequest>(raw);
    if let Some(existing) = intake::find_by_key(&state.db, owner(actor), JobKind::Import, key).await? {
        // The bound import's own upload is known by its stored digest even after it expired.
        let fp = match &typed {
            Ok(request) if request.upload == request_of(&existing)?.upload => Some(fingerprint_of(request, &resolved_of(&existing)?.sha256)?),
            Ok(request) => match find_own_and_touch(&state.db, actor, &request.upload).await? {
                Some(upload) => Some(fingerprint_of(request, &upload.sha256)?),
                None => None,
            },
            Err(_) => None,
        };
        return if fp.as_deref() == Some(existing.fingerprint.as_str()) {
            Ok(CreateOutcome::Replayed(view_for(state, actor, &existing).await?))
        } else {
            Err(AppError::IdempotencyKeyReused { operation_ref: existing.id.clone() })
        };
    }
    if state.drain.is_on(&state.db).await? {
        return Err(AppError::CreationPaused { retry_after_secs: crate::operations::DRAIN_RETRY_AFTER_SECS });
    }
    let request = typed?;
    let schema_digest = check(&state.config, &request)?;
    let upload = find_own_and_touch(&state.db, actor, &request.upload)
        .await?
        .ok_or(AppError::UploadNotFound)?;
    let fp = fingerprint_of(&request, &upload.sha256)?;
    let resolved = Resolved { object_key: upload.object_key.clone(), sha256: upload.sha256.clone(), bytes: upload.bytes };
    let job = NewJob {
        kind: JobKind::Import,
        key,
        fingerprint: &fp,
        report: &request.dataset,
        request: serde_json::to_string(&request).map_err(|e| AppError::Internal(e.to_string()))?,
        resolved: serde_json::to_string(&resolved).map_err(|e| AppError::Internal(e.to_string()))?,
        deployment: &upload.deployment,
        upload_id: Some(&upload.id),
        schema_digest,
    };
    match intake::create(&state.db, owner(actor), job, state.config.max_active_per_actor).await? {
        Intake::Created(row) => {
            state.wakeup.wake();
            Ok(CreateOutcome::Created(to_view(&row, None, None)?))
        }
        Intake::Bound(row) if row.fingerprint == fp => Ok(CreateOutcome::Replayed(view_for(state, actor, &row).await?)),
        Intake::Bound(row) => Err(AppError::IdempotencyKeyReused { operation_ref: row.id.clone() }),
        Intake::Full => Err(AppError::TooManyExports { retry_after_secs: 5 }),
    }
}

/// The actor's own import with this id; any other id is the same 404.
pub async fn find_own<C: ConnectionTrait>(db: &C, actor: &Actor, id: &str) -> Result<jobs::Model, AppError> {
    if JobKind::of_id(id) != Some(JobKind::Import) {
        return Err(AppError::ImportNotFound);
    }
    jobs::Entity::find_by_id(id.to_owned())
        .filter(jobs::Column::TenantId.eq(&actor.tenant_id))
        .filter(jobs::Column::ActorId.eq(&actor.user_id))
        .filter(jobs::Column::Kind.eq(JobKind::Import.as_str()))
        .one(db)
        .await?
        .ok_or(AppError::ImportNotFound)
}

/// The import's view for its actor, with its counts so far and a fresh link to its report.
async fn view_for(state: &ServiceContext, actor: &Actor, m: &jobs::Model) -> Result<ImportView, AppError> {
    let mark = last_mark(&state.db, &m.id).await?;
    to_view(m, Some(mark), report_link(state, actor, m).await?)
}

/// The view of a stored import, given its last batch's counts and a link to its report.
pub fn to_view(m: &jobs::Model, mark: Option<Mark>, download: Option<DownloadView>) -> Result<ImportView, AppError> {
    let request = request_of(m)?;
    let resolved = resolved_of(m)?;
    let plan = plan_of(m)?;
    let status = ExportStatus::parse(&m.status).ok_or_else(|| AppError::Internal(format!("unknown stored status {:?}", m.status)))?;
    let mark = mark.unwrap_or_default();
    let counts = match &plan {
        // A valid row the database refused counts as invalid: `valid` is what the counts of
        // created, updated and unchanged add up to.
        Some(p) => ImportCounts {
            rows: p.rows,
            valid: p.valid - mark.refused,
            invalid: p.invalid + mark.refused,
            created: mark.created,
            updated: mark.updated,
            unchanged: mark.unchanged,
            applied: if request.mode == ImportMode::Apply { mark.applied() } else { 0 },
        },
        None => ImportCounts::default(),
    };
    let running = matches!(status, ExportStatus::Running | ExportStatus::CancelRequested);
    let phase = running.then(|| if plan.is_some() { "applying" } else { "validating" }.to_owned());
    let report = match (&m.artifact_sha256, m.artifact_bytes) {
        (Some(sha256), Some(bytes)) => Some(ReportView { sha256: sha256.clone(), bytes, expires_at: rfc3339(m.artifact_expires_at.unwrap_or(0)), expired: m.artifact_expired }),
        _ => None,
    };
    let error = crate::exports::view::error_of(m);
    Ok(ImportView {
        id: m.id.clone(),
        kind: JobKind::Import.as_str().to_owned(),
        status,
        phase,
        dataset: request.dataset.clone(),
        mode: request.mode,
        on_error: request.on_error,
        upload: UploadRef { sha256: resolved.sha256, bytes: resolved.bytes },
        counts,
        first_errors: plan.map(|p| p.first_errors).unwrap_or_default(),
        progress: ImportProgress { rows_done: m.rows_written, rows_total: m.rows_total },
        report,
        report_status: report_status(m),
        download,
        error,
        attempt: m.attempt,
        next_attempt_at: m.next_attempt_at.map(rfc3339),
        created_at: rfc3339(m.created_at),
        updated_at: rfc3339(m.updated_at),
    })
}

/// The import with this id.
pub async fn get_import(state: &ServiceContext, actor: &Actor, id: &str) -> Result<ImportView, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    view_for(state, actor, &m).await
}

/// The actor's imports, newest first.
pub async fn list_imports(state: &ServiceContext, actor: &Actor, limit: Option<&str>, cursor: Option<&str>) -> Result<ImportList, AppError> {
    let page = list_page(state, actor, JobKind::Import, limit, cursor).await?;
    let mut items = Vec::with_capacity(page.rows.len());
    for m in &page.rows {
        items.push(view_for(state, actor, m).await?);
    }
    Ok(ImportList { items, next_cursor: page.next_cursor })
}

/// Cancels an import: at once when it waits, at the next batch when it runs.
pub async fn cancel_import(state: &ServiceContext, actor: &Actor, id: &str) -> Result<CancelOutcome, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    let row = cancel_own(state, actor, &m).await?;
    let view = view_for(state, actor, &row).await?;
    match view.status {
        ExportStatus::Cancelled => Ok(CancelOutcome::Cancelled(view)),
        ExportStatus::CancelRequested => Ok(CancelOutcome::Requested(view)),
        ExportStatus::Ready | ExportStatus::Failed => Err(AppError::ImportAlreadyFinished),
        ExportStatus::Queued | ExportStatus::Running | ExportStatus::RetryWait => Box::pin(cancel_import(state, actor, id)).await,
    }
}

/// How a report is served (SPEC §6: a CSV download is UTF-8 and says so).
const REPORT_MEDIA_TYPE: &str = "text/csv; charset=utf-8";

/// Whether `m`'s report may be read at `now`: it has one, kept and not past its expiry (which
/// the janitor may not have reached yet), and the job has finished.
fn report_readable(m: &jobs::Model, now: i64) -> Result<(), AppError> {
    let finished = ExportStatus::parse(&m.status).is_some_and(ExportStatus::is_terminal);
    let expired = m.artifact_expired || m.artifact_expires_at.is_some_and(|at| at <= now);
    match (&m.artifact_key, finished) {
        (Some(_), true) if expired => Err(AppError::ArtifactExpired),
        (Some(_), true) => Ok(()),
        _ => Err(AppError::ExportNotReady),
    }
}

/// A fresh link to the report, when it may be read by `actor` now.
async fn report_link(state: &ServiceContext, actor: &Actor, m: &jobs::Model) -> Result<Option<DownloadView>, AppError> {
    if report_readable(m, state.now_ms()).is_err() || !actor.role.may_import() {
        return Ok(None);
    }
    let (Some(sha), Some(key)) = (&m.artifact_sha256, &m.artifact_key) else { return Ok(None) };
    let ttl = state.config.link_ttl;
    let expires = (state.now_ms() + ttl.as_millis() as i64) / 1000;
    let store = state.stores.for_deployment(&state.db, &m.deployment).await?;
    let url = match store.presigner() {
        Some(presigner) => presigner.get(key, ttl, &report_name(m), REPORT_MEDIA_TYPE),
        None => state.links.mint(&m.id, sha, &actor.user_id, expires, None).await?,
    };
    Ok(Some(DownloadView { url, expires_at: rfc3339(expires * 1000) }))
}

/// The report's file name.
pub fn report_name(m: &jobs::Model) -> String {
    format!("{}-import-{}-report.csv", m.report, m.id)
}

/// `GET /api/imports/{id}/report`: a signed link to the report, recorded in the audit trail.
/// Reading it re-checks that the actor may import (403 `permission-revoked`).
pub async fn report_download(state: &ServiceContext, actor: &Actor, id: &str) -> Result<String, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    report_readable(&m, state.now_ms())?;
    if !actor.role_now()?.may_import() {
        return Err(AppError::PermissionRevoked);
    }
    let link = report_link(state, actor, &m).await?.ok_or(AppError::ExportNotReady)?;
    audit::record_event(&state.db, &m, Mover::User(&actor.user_id), state.now_ms(), "report link minted").await?;
    Ok(link.url)
}

/// What a signed link to an import's report serves, after checking the grant against the job
/// now: the report it names, kept, and an actor who may still import.
pub async fn open_report(state: &ServiceContext, grant: &crate::links::LinkGrant) -> Result<crate::service::artifacts::LinkedArtifact, AppError> {
    use crate::service::artifacts::{Body, LinkedArtifact, Served};
    let m = jobs::Entity::find_by_id(grant.export_id.clone()).one(&state.db).await?.ok_or(AppError::LinkInvalid)?;
    if m.kind != JobKind::Import.as_str() || m.artifact_sha256.as_deref() != Some(grant.sha256.as_str()) {
        return Err(AppError::LinkInvalid);
    }
    report_readable(&m, state.now_ms())?;
    let actor = crate::auth::load_active_actor(&state.db, &state.authority, &grant.actor_id, crate::auth::AuthVia::Token).await?;
    let role = match &actor {
        Some(a) if a.tenant_id == m.tenant_id => Some(a.role_now()?),
        _ => None,
    };
    if !role.is_some_and(|role| role.may_import()) {
        return Err(AppError::PermissionRevoked);
    }
    let key = object_store::path::Path::from(m.artifact_key.clone().ok_or(AppError::ExportNotReady)?);
    let store = state.stores.for_deployment(&state.db, &m.deployment).await?;
    let len = match m.artifact_bytes {
        Some(bytes) => bytes as u64,
        None => store.objects().head(&key).await.map_err(crate::service::artifacts::artifact_gone)?.size,
    };
    let filename = report_name(&m);
    Ok(LinkedArtifact { store, body: Body::Object(key), len, etag_sha256: grant.sha256.clone(), digest: grant.sha256.clone(), filename, media_type: REPORT_MEDIA_TYPE, served: Served::Artifact, export: m })
}
