//! The export service: every rule of creating, reading and downloading an export lives here
//! once; the REST controllers (and any other adapter) only translate HTTP to these calls.

use crate::service::artifacts::{artifact_gone, Body, LinkedArtifact, Served};
use crate::service::canonical::fingerprint;
use crate::service::context::ServiceContext;
use crate::service::key::IdempotencyKey;
use crate::service::owned::{cancel_own, counted, list_page, owner};
use crate::service::requests::typed_request;
use super::resolve::resolve;
use super::validate::{control_characters, validate};
use super::view::{request_of, resolved_of, status_of, to_view};
use crate::auth::{Actor, Role};
use crate::clock::rfc3339;
use crate::entities::jobs;
use crate::job_store::intake::{self, Intake, NewJob};
use crate::job_store::kind::JobKind;
use crate::job_store::{audit, Mover};
use crate::error::AppError;
use super::parts::PartRecord;
use app::{Consistency, DownloadView, ExportRequest, ExportStatus, ExportView, ResolvedContract};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde_json::Value;

/// What a create of an export did.
pub type CreateOutcome = crate::service::owned::CreateOutcome<ExportView>;

/// What a cancel of an export did.
pub type CancelOutcome = crate::service::owned::CancelOutcome<ExportView>;



/// Whether `role` may export every column of `resolved` (SPEC §2's "authorised", less activity,
/// which the caller's lookup already established).
/// A report this process's catalog no longer has covers no one.
pub fn role_covers(catalog: &crate::catalog::Catalog, role: Role, report: &str, resolved: &ResolvedContract) -> bool {
    catalog.report(report).is_some_and(|r| r.covers(role, &resolved.columns))
}


/// The fingerprint of a request (SPEC §3.1): of the intent with its defaults filled in, except the
/// fields added later (`consistency`, `options.compression`, and `options.language`, which is
/// not even serialised at its default), which enter it only when they differ from their default, so operations and stored browser intents made before they existed
/// still replay.
fn fingerprint_of(request: &ExportRequest) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(request)?;
    if request.consistency == app::Consistency::default() {
        value.as_object_mut().map(|r| r.remove("consistency"));
    }
    if request.options.compression == app::Compression::default() {
        value.get_mut("options").and_then(|o| o.as_object_mut()).map(|o| o.remove("compression"));
    }
    Ok(fingerprint(&value))
}


async fn find_by_key<C: ConnectionTrait>(db: &C, actor: &Actor, key: &str) -> Result<Option<jobs::Model>, AppError> {
    Ok(intake::find_by_key(db, owner(actor), JobKind::Export, key).await?)
}

/// The answer to a key that is already bound: a replay if the intent matches — the operation as
/// it is now, with a fresh link when it is ready for this actor — else 422.
async fn replay_or_conflict(state: &ServiceContext, actor: &Actor, existing: &jobs::Model, fingerprint: Option<&str>) -> Result<CreateOutcome, AppError> {
    if fingerprint == Some(existing.fingerprint.as_str()) {
        view_for(state, actor, existing).await.map(CreateOutcome::Replayed)
    } else {
        Err(AppError::IdempotencyKeyReused { operation_ref: existing.id.clone() })
    }
}

/// The first rule of a create (SPEC §3.1): the actor's role may export at all. An adapter calls it
/// before it reads the key and the body, so the order of answers is the contract's;
/// `create_export` checks it again for any caller that did not.
pub fn ensure_may_export(actor: &Actor) -> Result<(), AppError> {
    if actor.role_now()?.may_export() {
        Ok(())
    } else {
        Err(AppError::ExportNotPermitted("your role may not export".into()))
    }
}

/// Creates an export for `request` (the JSON document as sent, before defaults), or replays the
/// one bound to `key` (SPEC §3.1, in its order of checks).
pub async fn create_export(state: &ServiceContext, actor: &Actor, key: &IdempotencyKey, request: Value) -> Result<CreateOutcome, AppError> {
    counted(state, create_or_replay(state, actor, key.as_str(), request).await)
}

async fn create_or_replay(state: &ServiceContext, actor: &Actor, key: &str, raw: Value) -> Result<CreateOutcome, AppError> {
    ensure_may_export(actor)?;
    let typed = typed_request::<ExportRequest>(raw.clone());
    let fp = typed.as_ref().ok().map(fingerprint_of).transpose()
        .map_err(|e| AppError::Internal(format!("request serialisation: {e}")))?;

    if let Some(existing) = find_by_key(&state.db, actor, key).await? {
        return replay_or_conflict(state, actor, &existing, fp.as_deref()).await;
    }
    // `exportd drain`: no new operation, while replays above still answer.
    if state.drain.is_on(&state.db).await? {
        return Err(AppError::CreationPaused { retry_after_secs: crate::operations::DRAIN_RETRY_AFTER_SECS });
    }

    let mut errors = Vec::new();
    control_characters(&raw, "", &mut errors);
    if !errors.is_empty() {
        return Err(AppError::InvalidRequest(errors));
    }
    let request = typed?;
    let fp = fp.ok_or_else(|| AppError::Internal("fingerprint missing for a valid request".into()))?;
    let report = validate(&state.config.catalog, &request, actor.role)?.report;
    let unsendable = crate::notifications::check(request.notify.as_ref(), &state.config);
    if !unsendable.is_empty() {
        return Err(AppError::InvalidRequest(unsendable));
    }
    let now = state.clock.now();
    let (resolved, _) = resolve(report, &request, actor.role, &actor.deployment, now)?;
    insert_new(state, actor, key, &fp, &request, &resolved, report.digest()).await
}

/// What a schedule's run made of its window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduledRun {
    /// The window's operation, made now.
    Created(String),
    /// The window had its operation already.
    AlreadyRan,
}

/// Creates a schedule's export of one window under its service identity `actor`, whose role is
/// already the lesser of the schedule's and its owner's: the same checks as any create, under
/// the key that makes the window once, exempt from the per-actor limit (contract §15).
pub async fn create_scheduled(state: &ServiceContext, actor: &Actor, key: &str, request: &ExportRequest) -> Result<ScheduledRun, AppError> {
    ensure_may_export(actor)?;
    if find_by_key(&state.db, actor, key).await?.is_some() {
        return Ok(ScheduledRun::AlreadyRan);
    }
    if state.drain.is_on(&state.db).await? {
        return Err(AppError::CreationPaused { retry_after_secs: crate::operations::DRAIN_RETRY_AFTER_SECS });
    }
    let fp = fingerprint_of(request).map_err(|e| AppError::Internal(format!("request serialisation: {e}")))?;
    let report = validate(&state.config.catalog, request, actor.role)?.report;
    let (resolved, _) = resolve(report, request, actor.role, &actor.deployment, state.clock.now())?;
    match insert_job(state, actor, key, &fp, request, &resolved, report.digest(), u64::MAX).await? {
        Intake::Created(row) => {
            state.wakeup.wake();
            Ok(ScheduledRun::Created(row.id))
        }
        Intake::Bound(_) => Ok(ScheduledRun::AlreadyRan),
        Intake::Full => Err(AppError::Internal("a schedule's run met the per-actor limit it is exempt from".into())),
    }
}

/// The new operation's row, for `actor` under `key`, with at most `max_active` unfinished.
#[allow(clippy::too_many_arguments)]
async fn insert_job(
    state: &ServiceContext,
    actor: &Actor,
    key: &str,
    fp: &str,
    request: &ExportRequest,
    resolved: &ResolvedContract,
    schema_digest: String,
    max_active: u64,
) -> Result<Intake, AppError> {
    let job = NewJob {
        kind: JobKind::Export,
        key,
        fingerprint: fp,
        report: request.report.as_str(),
        request: serde_json::to_string(request).map_err(|e| AppError::Internal(e.to_string()))?,
        resolved: serde_json::to_string(resolved).map_err(|e| AppError::Internal(e.to_string()))?,
        deployment: resolved.deployment.as_str(),
        upload_id: None,
        schema_digest,
    };
    Ok(intake::create(&state.db, owner(actor), job, max_active).await?)
}

async fn insert_new(
    state: &ServiceContext,
    actor: &Actor,
    key: &str,
    fp: &str,
    request: &ExportRequest,
    resolved: &ResolvedContract,
    schema_digest: String,
) -> Result<CreateOutcome, AppError> {
    match insert_job(state, actor, key, fp, request, resolved, schema_digest, state.config.max_active_per_actor).await? {
        Intake::Created(row) => {
            state.wakeup.wake();
            // The row as inserted: a worker may claim it at once, but the answer to this
            // request is the operation as it was accepted.
            Ok(CreateOutcome::Created(to_view(&row, None, None)?))
        }
        Intake::Bound(row) => replay_or_conflict(state, actor, &row, Some(fp)).await,
        Intake::Full => Err(AppError::TooManyExports { retry_after_secs: 5 }),
    }
}


/// The actor's own export with this id; any other id (unknown, malformed, another actor's or
/// tenant's) is the same 404.
pub async fn find_own<C: ConnectionTrait>(db: &C, actor: &Actor, id: &str) -> Result<jobs::Model, AppError> {
    if !crate::service::ids::is_export_id(id) {
        return Err(AppError::ExportNotFound);
    }
    let m = jobs::Entity::find_by_id(id.to_owned()).filter(jobs::Column::TenantId.eq(&actor.tenant_id)).one(db).await?.ok_or(AppError::ExportNotFound)?;
    if m.actor_id == actor.user_id || crate::schedules::admits(db, actor, &m.actor_id).await? {
        return Ok(m);
    }
    Err(AppError::ExportNotFound)
}


fn is_checkpointed(m: &jobs::Model) -> Result<bool, AppError> {
    Ok(request_of(m)?.consistency == Consistency::Checkpointed)
}


/// The name a downloaded file is saved under, and its media type.
pub fn download_name(m: &jobs::Model, served: Served) -> Result<(String, &'static str), AppError> {
    let file = crate::file_type::FileType::of(&request_of(m)?);
    let (extension, media) = (file.extension(), file.media_type());
    Ok(match (served, is_checkpointed(m)?) {
        (Served::Part(n), _) => (format!("{}-{}-part-{n:05}.{extension}", m.report, m.id), media),
        (Served::Artifact, true) => (format!("{}-{}.zip", m.report, m.id), "application/zip"),
        (Served::Artifact, false) => (format!("{}-{}.{extension}", m.report, m.id), media),
    })
}

/// A ready checkpointed export's parts, from its checkpoints; `None` for any other export.
pub async fn parts_of(state: &ServiceContext, m: &jobs::Model) -> Result<Option<Vec<PartRecord>>, AppError> {
    if !is_checkpointed(m)? || status_of(m)? != ExportStatus::Ready {
        return Ok(None);
    }
    let checkpointed = crate::job_store::checkpoints::of_job(&state.db, &m.id).await?;
    Ok(Some(super::parts::from_checkpoints(&checkpointed).map_err(AppError::Internal)?))
}

/// A link for `actor` to what `served` names of a ready export, if they may download it now,
/// lasting `EXPORTD_LINK_TTL_SECS`. A file or a part on S3: a presigned GET (the store cannot
/// re-check authority, so the link's lifetime is the bound). Anything on a local folder, and a
/// bundle anywhere (exportd serves it, streamed from its parts): a signed `/files/…` link that
/// re-checks authority when it is used.
async fn mint_download(state: &ServiceContext, actor: &Actor, m: &jobs::Model, served: Served) -> Result<Option<DownloadView>, AppError> {
    let (Some(sha), Some(artifact), Ok(ExportStatus::Ready)) = (&m.artifact_sha256, &m.artifact_key, status_of(m)) else { return Ok(None) };
    if m.artifact_expired || !role_covers(&state.config.catalog, actor.role, &m.report, &resolved_of(m)?) {
        return Ok(None);
    }
    let key = match served {
        Served::Artifact => artifact.clone(),
        Served::Part(n) => match parts_of(state, m).await?.and_then(|parts| parts.into_iter().find(|p| p.index == n)) {
            Some(part) => part.key,
            None => return Ok(None),
        },
    };
    let ttl = state.config.link_ttl;
    let expires = (state.now_ms() + ttl.as_millis() as i64) / 1000;
    let store = state.stores.for_deployment(&state.db, &m.deployment).await?;
    let bundle = served == Served::Artifact && is_checkpointed(m)?;
    let part = match served {
        Served::Part(n) => Some(n),
        Served::Artifact => None,
    };
    let url = match store.presigner() {
        Some(presigner) if !bundle => {
            let (filename, media) = download_name(m, served)?;
            presigner.get(&key, ttl, &filename, media)
        }
        _ => state.links.mint(&m.id, sha, &actor.user_id, expires, part).await?,
    };
    Ok(Some(DownloadView { url, expires_at: rfc3339(expires * 1000) }))
}

/// The view of an export as `actor` sees it: with a fresh link when they may download it, and a
/// ready checkpointed export's parts.
async fn view_for(state: &ServiceContext, actor: &Actor, m: &jobs::Model) -> Result<ExportView, AppError> {
    let parts = parts_of(state, m).await?.map(|parts| parts.iter().map(PartRecord::view).collect());
    to_view(m, mint_download(state, actor, m, Served::Artifact).await?, parts)
}

/// The actor's view of one of their exports.
pub async fn get_export(state: &ServiceContext, actor: &Actor, id: &str) -> Result<ExportView, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    view_for(state, actor, &m).await
}

/// A fresh link for a download of what `served` names of the actor's export, in SPEC §2's order:
/// lookup → state → authority. A part that does not exist (or an export without parts) is
/// `export-not-found`.
pub async fn download_link(state: &ServiceContext, actor: &Actor, id: &str, served: Served) -> Result<String, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    if let Served::Part(_) = served {
        if !is_checkpointed(&m)? {
            return Err(AppError::ExportNotFound);
        }
    }
    if status_of(&m)? != ExportStatus::Ready {
        return Err(AppError::ExportNotReady);
    }
    if m.artifact_expired {
        return Err(AppError::ArtifactExpired);
    }
    if !role_covers(&state.config.catalog, actor.role_now()?, &m.report, &resolved_of(&m)?) {
        return Err(AppError::PermissionRevoked);
    }
    let link = mint_download(state, actor, &m, served).await?.ok_or(match served {
        Served::Part(_) => AppError::ExportNotFound,
        Served::Artifact => AppError::ExportNotReady,
    })?;
    let detail = match served {
        Served::Artifact => "download link minted".to_owned(),
        Served::Part(n) => format!("download link of part {n} minted"),
    };
    audit::record_event(&state.db, &m, Mover::User(&actor.user_id), state.now_ms(), &detail).await?;
    Ok(link.url)
}



/// What a verified link grants, after re-checking (SPEC §2) that it is still the same artifact,
/// still ready and not expired, and that the minting actor is still active in the export's
/// tenant and may still read every column of it.
pub async fn open_link(state: &ServiceContext, grant: &crate::links::LinkGrant) -> Result<LinkedArtifact, AppError> {
    let m = jobs::Entity::find_by_id(grant.export_id.clone()).one(&state.db).await?.ok_or(AppError::LinkInvalid)?;
    if m.artifact_sha256.as_deref() != Some(grant.sha256.as_str()) {
        return Err(AppError::LinkInvalid);
    }
    if status_of(&m)? != ExportStatus::Ready {
        return Err(AppError::ExportNotReady);
    }
    if m.artifact_expired {
        return Err(AppError::ArtifactExpired);
    }
    let actor = crate::auth::load_active_actor(&state.db, &state.authority, &grant.actor_id, crate::auth::AuthVia::Token).await?;
    let resolved = resolved_of(&m)?;
    let role = match &actor {
        Some(a) if a.tenant_id == m.tenant_id => Some(a.role_now()?),
        _ => None,
    };
    let allowed = role.is_some_and(|role| role_covers(&state.config.catalog, role, &m.report, &resolved));
    if !allowed {
        return Err(AppError::PermissionRevoked);
    }
    let key = object_store::path::Path::from(m.artifact_key.clone().ok_or_else(|| AppError::Internal(format!("ready export {} has no artifact key", m.id)))?);
    let store = state.stores.for_deployment(&state.db, &m.deployment).await?;
    let served = grant.part.map_or(Served::Artifact, Served::Part);
    let (filename, media_type) = download_name(&m, served)?;
    let parts = parts_of(state, &m).await?;
    let (body, len, etag_sha256, digest) = match (served, parts) {
        (Served::Part(n), Some(parts)) => {
            let part = parts.into_iter().find(|p| p.index == n).ok_or(AppError::LinkInvalid)?;
            (Body::Object(object_store::path::Path::from(part.key)), part.bytes as u64, part.sha256.clone(), part.sha256)
        }
        (Served::Part(_), None) => return Err(AppError::LinkInvalid),
        (Served::Artifact, Some(parts)) => {
            let manifest = store.objects().get(&key).await.map_err(artifact_gone)?.bytes().await.map_err(artifact_gone)?;
            let bundle = super::parts::bundle(manifest, &parts);
            let digest = m.bundle_digest.clone().ok_or_else(|| AppError::Internal(format!("ready bundle {} has no digest", m.id)))?;
            (Body::Bundle(bundle.clone()), bundle.size(), grant.sha256.clone(), digest)
        }
        (Served::Artifact, None) => {
            let len = match m.artifact_bytes {
                Some(bytes) => bytes as u64,
                None => store.objects().head(&key).await.map_err(artifact_gone)?.size,
            };
            (Body::Object(key), len, grant.sha256.clone(), grant.sha256.clone())
        }
    };
    Ok(LinkedArtifact { export: m, store, body, len, etag_sha256, digest, filename, media_type, served })
}

/// Records in the export's history that `actor_id` downloaded (part of) its file.
pub async fn record_download(state: &ServiceContext, m: &jobs::Model, actor_id: &str, detail: &str) -> Result<(), AppError> {
    audit::record_event(&state.db, m, Mover::User(actor_id), state.now_ms(), detail).await?;
    Ok(())
}



/// Cancels the actor's export: `queued`/`retry_wait` → `cancelled`, `running` →
/// `cancel_requested`, in one conditional update; a finished export is 409 with its view.
pub async fn cancel_export(state: &ServiceContext, actor: &Actor, id: &str) -> Result<CancelOutcome, AppError> {
    let m = find_own(&state.db, actor, id).await?;
    let row = cancel_own(state, actor, &m).await?;
    let view = view_for(state, actor, &row).await?;
    match view.status {
        ExportStatus::Cancelled => Ok(CancelOutcome::Cancelled(view)),
        ExportStatus::CancelRequested => Ok(CancelOutcome::Requested(view)),
        ExportStatus::Ready | ExportStatus::Failed => Err(AppError::ExportAlreadyFinished(Box::new(view))),
        // Moved back into a cancellable state between the update and the read (a hand-back, a
        // claim): cancel that state.
        ExportStatus::Queued | ExportStatus::Running | ExportStatus::RetryWait => Box::pin(cancel_export(state, actor, id)).await,
    }
}

pub use app::ExportList;




/// The actor's exports, newest first, `limit` per page (1–100), after `cursor`.
pub async fn list_exports(state: &ServiceContext, actor: &Actor, limit: Option<&str>, cursor: Option<&str>) -> Result<ExportList, AppError> {
    let page = list_page(state, actor, JobKind::Export, limit, cursor).await?;
    let mut items = Vec::with_capacity(page.rows.len());
    for m in &page.rows {
        items.push(view_for(state, actor, m).await?);
    }
    Ok(ExportList { items, next_cursor: page.next_cursor })
}

