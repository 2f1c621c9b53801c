//! The job store's transitions for workers: claim, heartbeat, release, retry, fail, hand back.
//! Each is one conditional UPDATE naming the state (and generation) it expects; zero rows means
//! someone else won, and the caller is told.

use super::WorkerContext;
use crate::db::{now_ms_sql, placeholder};
use crate::entities::exports;
use crate::exports::service::record_event;
use app::ExportStatus;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, EntityTrait, Statement, Value};

/// Binds values in order and numbers placeholders for the backend.
pub struct Sql {
    backend: DbBackend,
    text: String,
    values: Vec<Value>,
}

impl Sql {
    /// An empty statement for `backend`.
    pub fn new(backend: DbBackend) -> Sql {
        Sql { backend, text: String::new(), values: Vec::new() }
    }

    /// Appends SQL text.
    pub fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends a bound value.
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Sql {
        self.values.push(value.into());
        let p = placeholder(self.backend, self.values.len());
        self.text.push_str(&p);
        self
    }

    /// Appends `(?, ?, …)` of the values.
    pub fn bind_list<V: Into<Value> + Clone>(&mut self, values: &[V]) -> &mut Sql {
        self.push("(");
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(v.clone());
        }
        self.push(")")
    }

    /// The database clock, in epoch milliseconds.
    pub fn now(&mut self) -> &mut Sql {
        let now = now_ms_sql(self.backend);
        self.push(now)
    }

    /// The finished statement.
    pub fn build(&self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text.clone(), self.values.clone())
    }
}

/// Claims the oldest claimable job of a served deployment: queued, or retry_wait whose time
/// has come. Generation+1, attempt+1, lease from the database's clock.
pub async fn claim(ctx: &WorkerContext) -> Result<Option<exports::Model>, DbErr> {
    let backend = ctx.db.get_database_backend();
    let lease_ms = ctx.config.lease.as_millis() as i64;
    let mut q = Sql::new(backend);
    q.push("UPDATE exports SET status = 'running', generation = generation + 1, attempt = attempt + 1, lease_owner = ")
        .bind(ctx.worker_id.clone())
        .push(", lease_expires_at = ")
        .now()
        .push(" + ")
        .bind(lease_ms)
        .push(", next_attempt_at = NULL, updated_at = ")
        .now()
        .push(" WHERE id = (SELECT id FROM exports WHERE (status = 'queued' OR (status = 'retry_wait' AND next_attempt_at <= ")
        .now()
        .push("))");
    if !ctx.worker.deployments.is_empty() {
        q.push(" AND deployment IN ").bind_list(&ctx.worker.deployments);
    }
    q.push(" ORDER BY created_at, id LIMIT 1");
    if backend == DbBackend::Postgres {
        q.push(" FOR UPDATE SKIP LOCKED");
    }
    q.push(") AND status IN ('queued', 'retry_wait') RETURNING *");
    let job = exports::Entity::find().from_raw_sql(q.build()).one(&ctx.db).await?;
    if let Some(job) = &job {
        // The claim has committed: the job is ours whatever happens to its audit row.
        if let Err(e) = record_event(&ctx.db, &job.id, &job.tenant_id, &ctx.worker_id, job.updated_at, None, ExportStatus::Running, job.generation, Some("claimed".into())).await {
            tracing::warn!(export = %job.id, error = %e, "claim not recorded in the audit trail");
        }
    }
    Ok(job)
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was renewed; carry on.
    Renewed,
    /// Cancel was asked; stop at the next checkpoint.
    CancelRequested,
    /// The job is no longer ours under this generation.
    Lost,
}

/// Renews the lease of a job this worker holds under `generation`.
pub async fn heartbeat(ctx: &WorkerContext, id: &str, generation: i32) -> Result<Heartbeat, DbErr> {
    let backend = ctx.db.get_database_backend();
    let lease_ms = ctx.config.lease.as_millis() as i64;
    let mut q = Sql::new(backend);
    q.push("UPDATE exports SET lease_expires_at = ")
        .now()
        .push(" + ")
        .bind(lease_ms)
        .push(" WHERE id = ")
        .bind(id.to_owned())
        .push(" AND generation = ")
        .bind(generation)
        .push(" AND status IN ('running', 'cancel_requested') RETURNING status");
    let row = ctx.db.query_one_raw(q.build()).await?;
    Ok(match row {
        None => Heartbeat::Lost,
        Some(r) if r.try_get::<String>("", "status")? == "cancel_requested" => Heartbeat::CancelRequested,
        Some(_) => Heartbeat::Renewed,
    })
}

/// Records rows written (and counted) so far, fenced by generation.
pub async fn progress(ctx: &WorkerContext, id: &str, generation: i32, written: i64, total: i64) -> Result<bool, DbErr> {
    let mut q = Sql::new(ctx.db.get_database_backend());
    q.push("UPDATE exports SET rows_written = ")
        .bind(written)
        .push(", rows_total = ")
        .bind(total)
        .push(", updated_at = ")
        .now()
        .push(" WHERE id = ")
        .bind(id.to_owned())
        .push(" AND generation = ")
        .bind(generation)
        .push(" AND status = 'running'");
    Ok(ctx.db.execute_raw(q.build()).await?.rows_affected() == 1)
}

/// The published artifact's facts.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// Object key.
    pub key: String,
    /// Hex SHA-256.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: i64,
    /// Data rows.
    pub rows: i64,
}

/// `running → ready` under this generation. False when someone else won (or cancel was asked).
pub async fn release(ctx: &WorkerContext, job: &exports::Model, artifact: &Artifact) -> Result<bool, DbErr> {
    let ttl_ms = ctx.config.artifact_ttl.as_millis() as i64;
    let mut q = Sql::new(ctx.db.get_database_backend());
    q.push("UPDATE exports SET status = 'ready', artifact_key = ")
        .bind(artifact.key.clone())
        .push(", artifact_sha256 = ")
        .bind(artifact.sha256.clone())
        .push(", artifact_bytes = ")
        .bind(artifact.bytes)
        .push(", artifact_rows = ")
        .bind(artifact.rows)
        .push(", rows_written = ")
        .bind(artifact.rows)
        .push(", artifact_expires_at = ")
        .now()
        .push(" + ")
        .bind(ttl_ms)
        .push(", lease_owner = NULL, lease_expires_at = NULL, finished_at = ")
        .now()
        .push(", updated_at = ")
        .now()
        .push(" WHERE id = ")
        .bind(job.id.clone())
        .push(" AND generation = ")
        .bind(job.generation)
        .push(" AND status = 'running'");
    let won = ctx.db.execute_raw(q.build()).await?.rows_affected() == 1;
    if won {
        let now = crate::db::db_now_ms(&ctx.db).await?;
        record_event(&ctx.db, &job.id, &job.tenant_id, &ctx.worker_id, now, Some(ExportStatus::Running), ExportStatus::Ready, job.generation, None)
            .await
            .map_err(|e| DbErr::Custom(e.to_string()))?;
    }
    Ok(won)
}

/// Why a job ended without a file.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Stable code, e.g. `storage_unavailable`.
    pub code: &'static str,
    /// For people.
    pub message: String,
    /// Whether it may be retried.
    pub retryable: bool,
    /// Whether this attempt should be retried automatically (if attempts are left).
    pub transient: bool,
}

/// Ends an attempt that failed: `cancel_requested → cancelled`; a transient failure with
/// attempts left → `retry_wait` with backoff and jitter; otherwise → `failed`.
pub async fn fail(ctx: &WorkerContext, job: &exports::Model, failure: &Failure) -> Result<ExportStatus, DbErr> {
    let backend = ctx.db.get_database_backend();
    let support_ref = crate::error::new_support_ref();
    tracing::warn!(export = %job.id, generation = job.generation, code = failure.code, support_ref = %support_ref, message = %failure.message, "export attempt failed");
    let retry = failure.transient && job.attempt < ctx.config.max_attempts;
    let backoff_ms = backoff_ms(job.attempt);

    // A cancel asked during the attempt wins over any failure.
    let mut q = Sql::new(backend);
    q.push("UPDATE exports SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, finished_at = ")
        .now()
        .push(", updated_at = ")
        .now()
        .push(" WHERE id = ")
        .bind(job.id.clone())
        .push(" AND generation = ")
        .bind(job.generation)
        .push(" AND status = 'cancel_requested'");
    if ctx.db.execute_raw(q.build()).await?.rows_affected() == 1 {
        note(ctx, job, ExportStatus::CancelRequested, ExportStatus::Cancelled, None).await?;
        return Ok(ExportStatus::Cancelled);
    }

    let _ = ctx.faults.check("before_end_attempt", &job.id);
    let mut q = Sql::new(backend);
    if retry {
        q.push("UPDATE exports SET status = 'retry_wait', next_attempt_at = ")
            .now()
            .push(" + ")
            .bind(backoff_ms)
            .push(", lease_owner = NULL, lease_expires_at = NULL, updated_at = ")
            .now();
    } else {
        q.push("UPDATE exports SET status = 'failed', finished_at = ")
            .now()
            .push(", lease_owner = NULL, lease_expires_at = NULL, updated_at = ")
            .now();
    }
    q.push(", error_code = ")
        .bind(failure.code)
        .push(", error_message = ")
        .bind(failure.message.clone())
        .push(", error_retryable = ")
        .bind(failure.retryable)
        .push(", error_support_ref = ")
        .bind(support_ref)
        .push(" WHERE id = ")
        .bind(job.id.clone())
        .push(" AND generation = ")
        .bind(job.generation)
        .push(" AND status = 'running'");
    let to = if retry { ExportStatus::RetryWait } else { ExportStatus::Failed };
    if ctx.db.execute_raw(q.build()).await?.rows_affected() == 1 {
        note(ctx, job, ExportStatus::Running, to, Some(failure.code.to_owned())).await?;
        Ok(to)
    } else {
        Ok(ExportStatus::Running)
    }
}

/// Hands a running job back on shutdown: `running → queued`, attempt−1, so it is not counted.
pub async fn hand_back(ctx: &WorkerContext, job: &exports::Model) -> Result<bool, DbErr> {
    let mut q = Sql::new(ctx.db.get_database_backend());
    q.push("UPDATE exports SET status = 'queued', attempt = attempt - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = ")
        .now()
        .push(" WHERE id = ")
        .bind(job.id.clone())
        .push(" AND generation = ")
        .bind(job.generation)
        .push(" AND status = 'running'");
    let won = ctx.db.execute_raw(q.build()).await?.rows_affected() == 1;
    if won {
        note(ctx, job, ExportStatus::Running, ExportStatus::Queued, Some("handed back".into())).await?;
    }
    Ok(won)
}

async fn note(ctx: &WorkerContext, job: &exports::Model, from: ExportStatus, to: ExportStatus, detail: Option<String>) -> Result<(), DbErr> {
    let now = crate::db::db_now_ms(&ctx.db).await?;
    record_event(&ctx.db, &job.id, &job.tenant_id, &ctx.worker_id, now, Some(from), to, job.generation, detail)
        .await
        .map_err(|e| DbErr::Custom(e.to_string()))
}

/// Exponential backoff with jitter: about 1 s, 2 s, 4 s … capped at 5 minutes, ±25 %.
pub fn backoff_ms(attempt: i32) -> i64 {
    let base = 1000i64.saturating_mul(1i64 << attempt.clamp(0, 16)).min(300_000);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as i64; // 0..999 ‰ of a half-width
    base - base / 4 + base / 2 * jitter / 1000
}
