//! The one way a job of any kind is created (SPEC §3.1, §10): an idempotency key bound once per
//! (tenant, actor, kind), the per-actor limit of unfinished jobs counted per kind, and the row
//! inserted with its audit row. What a request means (its fingerprint, its payload) is the
//! kind's service's; whether a key already bound replays is decided there from the bound row.

use super::kind::JobKind;
use super::{audit, begin_write, db_now, Mover, UNFINISHED};
use crate::entities::{jobs, users};
use app::ExportStatus;
use sea_orm::sea_query::{Expr, OnConflict, Query};
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect};

/// Whose job it is.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The tenant.
    pub tenant_id: &'a str,
    /// The user who asked.
    pub actor_id: &'a str,
}

/// A job to create.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Its kind.
    pub kind: JobKind,
    /// The idempotency key.
    pub key: &'a str,
    /// The fingerprint of the request the key is bound to.
    pub fingerprint: &'a str,
    /// What it is about: an export's report, an import's dataset.
    pub report: &'a str,
    /// The request with its defaults, as JSON.
    pub request: String,
    /// What the request resolved to, as JSON.
    pub resolved: String,
    /// The deployment whose workers run it.
    pub deployment: &'a str,
    /// The upload it reads, if any.
    pub upload_id: Option<&'a str>,
    /// The schema version of its report or dataset in the accepting process's catalog.
    pub schema_digest: String,
}

/// What [`create`] did.
#[derive(Debug)]
pub enum Intake {
    /// A new job, as inserted.
    Created(Box<jobs::Model>),
    /// The key is already bound: the job it is bound to, as it is now.
    Bound(Box<jobs::Model>),
    /// The actor has the most unfinished jobs of this kind allowed, and the key is new.
    Full,
}

/// The job of `kind` that `owner`'s `key` is bound to.
pub async fn find_by_key<C: ConnectionTrait>(db: &C, owner: Owner<'_>, kind: JobKind, key: &str) -> Result<Option<jobs::Model>, DbErr> {
    jobs::Entity::find()
        .filter(jobs::Column::TenantId.eq(owner.tenant_id))
        .filter(jobs::Column::ActorId.eq(owner.actor_id))
        .filter(jobs::Column::Kind.eq(kind.as_str()))
        .filter(jobs::Column::IdempotencyKey.eq(key))
        .one(db)
        .await
}

/// Creates `job` for `owner` unless its key is bound already or the owner has `max_active`
/// unfinished jobs of its kind.
pub async fn create(db: &DatabaseConnection, owner: Owner<'_>, job: NewJob<'_>, max_active: u64) -> Result<Intake, DbErr> {
    let backend = db.get_database_backend();
    let txn = begin_write(db).await?;
    // Serialise creates per actor: on PostgreSQL by locking the actor's row; on SQLite the
    // IMMEDIATE transaction already holds the database's one write lock.
    if backend == DbBackend::Postgres {
        users::Entity::find_by_id(owner.actor_id.to_owned()).lock_exclusive().one(&txn).await?;
    }
    // The limit counts only new keys. The caller's lookup before this transaction found no job
    // for the key; if one was committed since, the insert below conflicts and the answer is the
    // bound job. Only when the count says no is the key looked up again, so the common create
    // makes no second lookup.
    let unfinished = jobs::Entity::find()
        .filter(jobs::Column::ActorId.eq(owner.actor_id))
        .filter(jobs::Column::Kind.eq(job.kind.as_str()))
        .filter(jobs::Column::Status.is_in(UNFINISHED))
        .count(&txn)
        .await?;
    if unfinished >= max_active {
        let existing = find_by_key(&txn, owner, job.kind, job.key).await?;
        txn.rollback().await?;
        return Ok(existing.map_or(Intake::Full, |row| Intake::Bound(Box::new(row))));
    }
    let id = job.kind.new_id();
    // Created and updated by the database's clock, the one every lease and TTL is measured by,
    // not this host's. `RETURNING` gives the row as inserted; none when the key's row exists.
    let now = db_now(backend);
    use jobs::Column as C;
    let mut insert = Query::insert();
    insert
        .into_table(jobs::Entity)
        .columns([
            C::Id, C::TenantId, C::ActorId, C::Kind, C::IdempotencyKey, C::Fingerprint, C::Report, C::Request, C::Resolved, C::Deployment, C::Status,
            C::Generation, C::Attempt, C::RowsWritten, C::ArtifactExpired, C::UploadId, C::SchemaDigest, C::CreatedAt, C::UpdatedAt,
        ])
        .values([
            Expr::val(id.as_str()), Expr::val(owner.tenant_id), Expr::val(owner.actor_id), Expr::val(job.kind.as_str()), Expr::val(job.key), Expr::val(job.fingerprint),
            Expr::val(job.report), Expr::val(job.request), Expr::val(job.resolved), Expr::val(job.deployment),
            Expr::val(ExportStatus::Queued.as_str()), Expr::val(0), Expr::val(0), Expr::val(0i64), Expr::val(false), Expr::val(job.upload_id), Expr::val(job.schema_digest), now.clone(), now,
        ])
        .map_err(|e| DbErr::Custom(format!("building the insert: {e}")))?
        .on_conflict(OnConflict::columns([C::TenantId, C::ActorId, C::Kind, C::IdempotencyKey]).do_nothing().to_owned())
        .returning_all();
    let inserted = jobs::Entity::find().from_raw_sql(backend.build(&insert)).one(&txn).await?;
    if let Some(row) = &inserted {
        audit::record_created(&txn, row, Mover::User(owner.actor_id)).await?;
    }
    txn.commit().await?;
    if let Some(row) = inserted {
        return Ok(Intake::Created(Box::new(row)));
    }
    let bound = find_by_key(db, owner, job.kind, job.key).await?.ok_or_else(|| DbErr::Custom("a job vanished after a conflicting insert".into()))?;
    Ok(Intake::Bound(Box::new(bound)))
}
