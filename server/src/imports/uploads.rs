//! Uploads (SPEC §10): a CSV file streamed into the tenant's deployment store — never held in
//! memory, at most `EXPORTD_MAX_UPLOAD_BYTES` — and known by its digest: the same bytes from the
//! same user again are the same upload (never matched across users or tenants).
//!
//! The bytes go first to `uploading/{id}` while they are hashed and counted; only a complete
//! file within the limit is published, at `uploads/{tenant}/{id}/{sha256}.csv`, and recorded.
//! Each upload owns its object, so the janitor can remove an expired upload's row and then its
//! object without racing a new upload of the same bytes (which makes a new row and object).

use crate::auth::Actor;
use crate::entities::uploads;
use crate::error::AppError;
use crate::service::context::ServiceContext;
use crate::job_store::db_now;
use app::UploadView;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::path::Path;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict, Query};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The prefix of every upload id.
pub const UPLOAD_ID_PREFIX: &str = "upl_";

/// What `upload` did.
#[derive(Debug)]
pub enum UploadOutcome {
    /// New bytes: a new upload (201).
    Created(UploadView),
    /// The same bytes as an upload this user already has (200).
    Existing(UploadView),
}

/// Whether `id` has the shape of an upload id.
pub fn is_upload_id(id: &str) -> bool {
    crate::job_store::kind::is_prefixed_id(id, UPLOAD_ID_PREFIX)
}

/// The first rule of an upload or an import (SPEC §10): only an admin.
pub fn ensure_may_import(actor: &Actor) -> Result<(), AppError> {
    if actor.role_now()?.may_import() {
        Ok(())
    } else {
        Err(AppError::ImportNotPermitted)
    }
}

/// The key of an upload's bytes while they arrive.
pub fn receiving_key(id: &str) -> Path {
    Path::from(format!("uploading/{id}"))
}

/// The key of an upload's published bytes.
pub fn upload_key(tenant_id: &str, id: &str, sha256: &str) -> Path {
    Path::from(format!("uploads/{tenant_id}/{id}/{sha256}.csv"))
}

/// The upload id of a key under `uploading/` or `uploads/`.
pub fn upload_id_of_key(key: &Path) -> Option<String> {
    let parts: Vec<_> = key.parts().collect();
    let id = match parts.as_slice() {
        [root, id] if root.as_ref() == "uploading" => id.as_ref(),
        [root, _tenant, id, _file] if root.as_ref() == "uploads" => id.as_ref(),
        _ => return None,
    };
    is_upload_id(id).then(|| id.to_owned())
}

fn view(row: &uploads::Model) -> UploadView {
    UploadView { upload: row.id.clone(), sha256: row.sha256.clone(), bytes: row.bytes }
}

/// Receives `body` as an upload of `actor`'s. A body above the limit is 413 and nothing of it is
/// kept; a store that fails is 500 and nothing is recorded. A body that sends nothing for
/// `idle` is given up (408): an upload may take long, but never wait for ever.
pub async fn upload<S, E>(state: &ServiceContext, actor: &Actor, body: S, idle: std::time::Duration) -> Result<UploadOutcome, AppError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    ensure_may_import(actor)?;
    // `exportd drain` stops uploads too (SPEC §9): nothing new is stored while it is on.
    if state.drain.is_on(&state.db).await? {
        return Err(AppError::CreationPaused { retry_after_secs: crate::operations::DRAIN_RETRY_AFTER_SECS });
    }
    let store = state.stores.for_deployment(&state.db, &actor.deployment).await?;
    let id = format!("{UPLOAD_ID_PREFIX}{}", uuid::Uuid::now_v7().simple());
    let receiving = receiving_key(&id);
    let received = receive(&store, &receiving, body, state.config.max_upload_bytes, idle).await;
    let (sha256, bytes) = match received {
        Ok(done) => done,
        Err(e) => {
            // Nothing of a refused or broken body is kept (a multipart upload was aborted).
            let _ = store.delete(&receiving).await;
            return Err(e);
        }
    };
    let outcome = record(state, actor, &store, &id, &receiving, &sha256, bytes).await;
    if let Err(e) = store.delete(&receiving).await {
        tracing::warn!(upload = %id, error = %e, "received bytes not deleted; the janitor will");
    }
    outcome
}

/// Streams `body` to `key`, hashing and counting it; refuses it past `max` bytes.
async fn receive<S, E>(store: &crate::storage::ExportStore, key: &Path, mut body: S, max: u64, idle: std::time::Duration) -> Result<(String, i64), AppError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut staged = store.stage(key, Arc::new(|| {}));
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        let next = match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(_) => {
                let _ = staged.abort().await;
                return Err(AppError::RequestTimeout);
            }
        };
        let chunk = match next {
            Ok(chunk) => chunk,
            Err(e) => {
                let _ = staged.abort().await;
                // The sender went away mid-body (it will not read an answer); the cause is logged.
                tracing::info!(error = %e, "an upload's body broke off");
                return Err(AppError::RequestTimeout);
            }
        };
        size += chunk.len() as u64;
        if size > max {
            let _ = staged.abort().await;
            drain(&mut body, idle).await;
            return Err(AppError::UploadTooLarge { max });
        }
        hasher.update(&chunk);
        staged.write(&chunk).await?;
    }
    staged.finish().await?;
    Ok((hex::encode(hasher.finalize()), size as i64))
}

/// How much of a refused body is read and dropped so that its sender, still sending, gets the
/// answer instead of a reset connection; a larger rest is not waited for.
pub const DRAIN_LIMIT: u64 = 8 << 20;

/// Reads and drops what is left of `body`, up to [`DRAIN_LIMIT`].
async fn drain<S, E>(body: &mut S, idle: std::time::Duration)
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut drained = 0u64;
    while drained < DRAIN_LIMIT {
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(chunk))) => drained += chunk.len() as u64,
            _ => return,
        }
    }
}

/// Binds the received bytes to an upload: this user's upload of the same digest, touched; else
/// a new one, published from `receiving`.
async fn record(
    state: &ServiceContext,
    actor: &Actor,
    store: &crate::storage::ExportStore,
    id: &str,
    receiving: &Path,
    sha256: &str,
    bytes: i64,
) -> Result<UploadOutcome, AppError> {
    if let Some(row) = touch(&state.db, actor, sha256).await? {
        return Ok(UploadOutcome::Existing(view(&row)));
    }
    let key = upload_key(&actor.tenant_id, id, sha256);
    store.publish(receiving, &key, Arc::new(|| {})).await?;
    store.make_durable(&key).await?;
    let backend = state.db.get_database_backend();
    use uploads::Column as C;
    let mut insert = Query::insert();
    insert
        .into_table(uploads::Entity)
        .columns([C::Id, C::TenantId, C::UserId, C::Deployment, C::Sha256, C::Bytes, C::ObjectKey, C::CreatedAt, C::LastUsedAt])
        .values([
            Expr::val(id), Expr::val(actor.tenant_id.as_str()), Expr::val(actor.user_id.as_str()), Expr::val(actor.deployment.as_str()),
            Expr::val(sha256), Expr::val(bytes), Expr::val(key.as_ref()), db_now(backend), db_now(backend),
        ])
        .map_err(|e| AppError::Internal(format!("building the insert: {e}")))?
        .on_conflict(OnConflict::columns([C::TenantId, C::UserId, C::Sha256]).do_nothing().to_owned())
        .returning_all();
    if let Some(row) = uploads::Entity::find().from_raw_sql(backend.build(&insert)).one(&state.db).await? {
        return Ok(UploadOutcome::Created(view(&row)));
    }
    // The same bytes arrived at once in another request, which recorded them first: its upload
    // is the one, and this copy goes.
    if let Err(e) = store.delete(&key).await {
        tracing::warn!(upload = %id, error = %e, "a duplicate upload's copy not deleted; the janitor will");
    }
    touch(&state.db, actor, sha256)
        .await?
        .map(|row| UploadOutcome::Existing(view(&row)))
        .ok_or_else(|| AppError::Internal("an upload vanished after a conflicting insert".into()))
}

/// This user's upload of `sha256`, its last use moved to now; `None` when there is none.
async fn touch<C: ConnectionTrait>(db: &C, actor: &Actor, sha256: &str) -> Result<Option<uploads::Model>, AppError> {
    let touched = uploads::Entity::update_many()
        .col_expr(uploads::Column::LastUsedAt, db_now(db.get_database_backend()))
        .filter(uploads::Column::TenantId.eq(&actor.tenant_id))
        .filter(uploads::Column::UserId.eq(&actor.user_id))
        .filter(uploads::Column::Sha256.eq(sha256))
        .exec_with_returning(db)
        .await?;
    Ok(touched.into_iter().next())
}

/// `actor`'s own upload `id`, its last use moved to now (an import names it); any other id is
/// `None`.
pub async fn find_own_and_touch<C: ConnectionTrait>(db: &C, actor: &Actor, id: &str) -> Result<Option<uploads::Model>, AppError> {
    if !is_upload_id(id) {
        return Ok(None);
    }
    let touched = uploads::Entity::update_many()
        .col_expr(uploads::Column::LastUsedAt, db_now(db.get_database_backend()))
        .filter(uploads::Column::Id.eq(id))
        .filter(uploads::Column::TenantId.eq(&actor.tenant_id))
        .filter(uploads::Column::UserId.eq(&actor.user_id))
        .exec_with_returning(db)
        .await?;
    Ok(touched.into_iter().next())
}

/// Removes up to `limit` uploads unused since `before` that no unfinished job names, of the
/// `deployments` (all when empty), and returns them: the janitor deletes their objects next
/// (an object left by a crash in between is swept as an orphan). Each row goes only if it is
/// still unused when deleted, so an upload touched meanwhile stays.
pub async fn expire<C: ConnectionTrait>(db: &C, before: i64, deployments: &[String], limit: u64) -> Result<Vec<uploads::Model>, sea_orm::DbErr> {
    use sea_orm::{Condition, QuerySelect};
    let in_use = Query::select()
        .expr(Expr::val(1))
        .from(crate::entities::jobs::Entity)
        .and_where(Expr::col((crate::entities::jobs::Entity, crate::entities::jobs::Column::UploadId)).equals((uploads::Entity, uploads::Column::Id)))
        .and_where(Expr::col((crate::entities::jobs::Entity, crate::entities::jobs::Column::Status)).is_in(crate::job_store::UNFINISHED))
        .to_owned();
    let unused = || Condition::all().add(uploads::Column::LastUsedAt.lt(before)).add(Expr::exists(in_use.clone()).not());
    let mut candidates = uploads::Entity::find().filter(unused()).limit(limit);
    if !deployments.is_empty() {
        candidates = candidates.filter(uploads::Column::Deployment.is_in(deployments.iter().cloned()));
    }
    let mut gone = Vec::new();
    for row in candidates.all(db).await? {
        let deleted = uploads::Entity::delete_many().filter(uploads::Column::Id.eq(&row.id)).filter(unused()).exec(db).await?;
        if deleted.rows_affected == 1 {
            gone.push(row);
        }
    }
    Ok(gone)
}

/// Which of these upload ids have a row.
pub async fn existing<C: ConnectionTrait>(db: &C, ids: &[String]) -> Result<std::collections::HashSet<String>, sea_orm::DbErr> {
    use sea_orm::QuerySelect;
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let found: Vec<String> = uploads::Entity::find()
        .select_only()
        .column(uploads::Column::Id)
        .filter(uploads::Column::Id.is_in(ids.iter().cloned()))
        .into_tuple()
        .all(db)
        .await?;
    Ok(found.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_key_names_its_upload_and_nothing_else_does() {
        let id = format!("{UPLOAD_ID_PREFIX}{}", uuid::Uuid::now_v7().simple());
        assert_eq!(upload_id_of_key(&upload_key("ten_acme", &id, "ab")), Some(id.clone()));
        assert_eq!(upload_id_of_key(&receiving_key(&id)), Some(id));
        assert_eq!(upload_id_of_key(&Path::from("uploads/ten_acme/upl_x/ab.csv")), None);
        assert_eq!(upload_id_of_key(&Path::from("exports/ten_acme/exp_01a242dd4de1737ab303db50cc1dfded/ab.csv")), None);
    }
}
