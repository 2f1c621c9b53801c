//! Produces one export (SPEC §5 steps 2–8): authority, snapshot, stream CSV to a per-attempt
//! staging object while hashing, validate, publish create-if-absent under the content-addressed
//! key, re-check authority, release with one fenced update, delete the staging object.

use crate::auth::load_active_actor;
use crate::auth::AuthVia;
use crate::entities::exports;
use crate::exports::service::role_covers;
use crate::exports::view::{request_of, resolved_of};
use crate::storage::{artifact_key, staging_key, Store};
use crate::worker::csv_cells::{defuse, instant, money};
use crate::worker::queue::{self, Artifact, Failure, Heartbeat, Sql};
use crate::worker::WorkerContext;
use app::{ExportRequest, ResolvedContract};
use object_store::buffered::BufWriter;
use sea_orm::{AccessMode, ConnectionTrait, DatabaseTransaction, DbBackend, IsolationLevel, QueryResult, TransactionTrait};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// Rows read per page of the snapshot.
pub const PAGE_ROWS: u64 = 1000;

/// How a cell's value is read and written.
#[derive(Debug, Clone, Copy)]
enum Source {
    Int,
    Millis,
    Money,
    Text,
}

/// The SQL expression and kind behind each report column.
fn source(report: &str, column: &str) -> Option<(&'static str, Source)> {
    use Source::*;
    Some(match (report, column) {
        ("orders", "order_id") => ("o.id", Int),
        ("orders", "placed_at") => ("o.placed_at", Millis),
        ("orders", "customer_id") => ("o.customer_id", Int),
        ("orders", "customer_name") => ("c.name", Text),
        ("orders", "customer_email") => ("c.email", Text),
        ("orders", "customer_phone") => ("c.phone", Text),
        ("orders", "country") => ("o.country", Text),
        ("orders", "status") => ("o.status", Text),
        ("orders", "total") => ("o.total_cents", Money),
        ("orders", "currency") => ("o.currency", Text),
        ("orders", "notes") => ("o.notes", Text),
        ("customers", "customer_id") => ("c.id", Int),
        ("customers", "created_at") => ("c.created_at", Millis),
        ("customers", "name") => ("c.name", Text),
        ("customers", "email") => ("c.email", Text),
        ("customers", "phone") => ("c.phone", Text),
        ("customers", "country") => ("c.country", Text),
        ("customers", "lifetime_total") => ("c.lifetime_total_cents", Money),
        _ => return None,
    })
}

/// Why producing stopped early.
enum Stop {
    /// A failure to record (retry or fail).
    Failed(Failure),
    /// Cancel was asked: end `cancelled`.
    Cancelled,
    /// Someone else holds the job now; touch nothing.
    Lost,
    /// Shutdown: hand the job back.
    Shutdown,
}

// The detail goes to the log beside the support reference; the stored message is fixed, so no
// path, SQL or store error reaches a client.
fn storage(e: impl std::fmt::Display) -> Stop {
    tracing::warn!(error = %e, "object store failure");
    Stop::Failed(Failure {
        code: "storage_unavailable",
        message: "The file store is unavailable; the export will be retried.".into(),
        retryable: true,
        transient: true,
    })
}

fn internal(e: impl std::fmt::Display) -> Stop {
    tracing::warn!(error = %e, "internal failure while exporting");
    Stop::Failed(Failure { code: "internal", message: "An internal error stopped the export.".into(), retryable: true, transient: true })
}

fn revoked() -> Stop {
    Stop::Failed(Failure {
        code: "permission_revoked",
        message: "The requesting user may no longer export this.".into(),
        retryable: false,
        transient: false,
    })
}

/// Runs one claimed job to its end, whatever happens.
pub async fn run(ctx: &WorkerContext, job: exports::Model) {
    let (hb_tx, hb_rx) = watch::channel(Heartbeat::Renewed);
    let heartbeat = tokio::spawn(heartbeat_loop(ctx.clone(), job.id.clone(), job.generation, hb_tx));
    let staging = staging_key(&job.id, job.generation);
    let store = ctx.stores.for_deployment(&job.deployment).map_err(|e| storage(e.to_string()));
    let result = match &store {
        Ok(store) => produce(ctx, &job, store, &hb_rx).await,
        Err(_) => Err(storage("the deployment's store cannot be opened")),
    };
    heartbeat.abort();
    let ended = match result {
        Ok(()) => Ok(()),
        Err(Stop::Failed(f)) => queue::fail(ctx, &job, &f).await.map(|_| ()),
        Err(Stop::Cancelled) => {
            let f = Failure { code: "cancelled", message: "cancelled".into(), retryable: false, transient: false };
            queue::fail(ctx, &job, &f).await.map(|_| ())
        }
        Err(Stop::Lost) => {
            tracing::info!(export = %job.id, generation = job.generation, "lease lost; stopping without publishing");
            Ok(())
        }
        Err(Stop::Shutdown) => match queue::hand_back(ctx, &job).await {
            // Not running under our generation any more: a cancel asked meanwhile ends it.
            Ok(false) => {
                let f = Failure { code: "cancelled", message: "cancelled".into(), retryable: false, transient: false };
                queue::fail(ctx, &job, &f).await.map(|_| ())
            }
            other => other.map(|_| ()),
        },
    };
    if let Err(e) = ended {
        tracing::warn!(export = %job.id, error = %e, "could not record the end of an attempt; the janitor will");
    }
    if let Ok(store) = store {
        // Only this attempt's own staging object; never anything under exports/.
        if let Err(e) = store.delete(&staging).await {
            if !matches!(e, object_store::Error::NotFound { .. }) {
                tracing::warn!(export = %job.id, error = %e, "staging object not deleted; the janitor will");
            }
        }
    }
}

async fn heartbeat_loop(ctx: WorkerContext, id: String, generation: i32, tx: watch::Sender<Heartbeat>) {
    let every = (ctx.config.lease / 3).max(std::time::Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        match queue::heartbeat(&ctx, &id, generation).await {
            Ok(Heartbeat::Renewed) => {}
            Ok(other) => {
                let _ = tx.send(other);
                return;
            }
            Err(e) => tracing::warn!(export = %id, error = %e, "heartbeat failed; retrying"),
        }
    }
}

fn checkpoint(ctx: &WorkerContext, hb: &watch::Receiver<Heartbeat>) -> Result<(), Stop> {
    match *hb.borrow() {
        Heartbeat::Lost => return Err(Stop::Lost),
        Heartbeat::CancelRequested => return Err(Stop::Cancelled),
        Heartbeat::Renewed => {}
    }
    if ctx.shutdown.is_cancelled() {
        return Err(Stop::Shutdown);
    }
    Ok(())
}

async fn authorised(ctx: &WorkerContext, job: &exports::Model, resolved: &ResolvedContract) -> Result<bool, Stop> {
    let actor = load_active_actor(&ctx.db, &job.actor_id, AuthVia::Token).await.map_err(internal)?;
    Ok(actor.is_some_and(|a| a.tenant_id == job.tenant_id && role_covers(a.role, &job.report, resolved)))
}

async fn produce(ctx: &WorkerContext, job: &exports::Model, store: &Store, hb: &watch::Receiver<Heartbeat>) -> Result<(), Stop> {
    if !ctx.worker.serves(&job.deployment) {
        tracing::warn!(export = %job.id, deployment = %job.deployment, "refusing a job of a deployment this worker does not serve");
        return Err(Stop::Shutdown);
    }
    let request = request_of(job).map_err(internal)?;
    let resolved = resolved_of(job).map_err(internal)?;
    if !authorised(ctx, job, &resolved).await? {
        return Err(revoked());
    }
    let backend = ctx.db.get_database_backend();
    let snapshot = match backend {
        DbBackend::Postgres => ctx.db.begin_with_config(Some(IsolationLevel::RepeatableRead), Some(AccessMode::ReadOnly)).await,
        _ => ctx.db.begin().await,
    }
    .map_err(internal)?;
    let from = parse_ms(&resolved.from)?;
    let to = parse_ms(&resolved.to)?;
    let total = count_rows(&snapshot, job, &request, from, to).await?;
    record_progress(ctx, job, 0, total).await?;

    let staging = staging_key(&job.id, job.generation);
    let mut upload = BufWriter::new(store.clone(), staging.clone());
    let mut hasher = Sha256::new();
    let mut bytes: i64 = 0;
    let mut pending = Vec::with_capacity(64 * 1024);
    if request.options.bom {
        pending.extend_from_slice("\u{feff}".as_bytes());
    }
    let mut csv = csv_writer(pending);
    csv.write_record(&resolved.columns).map_err(internal)?;

    let mut rows: i64 = 0;
    let mut after: i64 = i64::MIN;
    loop {
        checkpoint(ctx, hb)?;
        let page = fetch_page(&snapshot, job, &request, &resolved, from, to, after).await?;
        let done = (page.len() as u64) < PAGE_ROWS;
        for row in &page {
            let mut record = Vec::with_capacity(resolved.columns.len());
            for column in &resolved.columns {
                record.push(cell(row, &job.report, column)?);
            }
            csv.write_record(&record).map_err(internal)?;
            after = row.try_get::<i64>("", "row_id").map_err(internal)?;
            rows += 1;
        }
        let chunk = csv.into_inner().map_err(|e| internal(e.error()))?;
        csv = csv_writer(Vec::with_capacity(chunk.capacity()));
        hasher.update(&chunk);
        bytes += chunk.len() as i64;
        upload.write_all(&chunk).await.map_err(storage)?;
        record_progress(ctx, job, rows, total).await?;
        if rows == page.len() as i64 {
            ctx.faults.check("mid_stream", &job.id).map_err(|_| storage("injected"))?;
        }
        if done {
            break;
        }
    }
    snapshot.commit().await.map_err(internal)?;
    upload.shutdown().await.map_err(storage)?;

    if rows != total {
        return Err(internal(format!("wrote {rows} rows but the snapshot has {total}")));
    }
    let staged = store.head(&staging).await.map_err(storage)?;
    if staged.size as i64 != bytes {
        return Err(storage(format!("staged {} bytes, wrote {bytes}", staged.size)));
    }
    ctx.faults.check("after_staging", &job.id).map_err(|_| storage("injected"))?;
    let sha256 = hex::encode(hasher.finalize());
    let key = artifact_key(&job.tenant_id, &job.id, &sha256);
    checkpoint(ctx, hb)?;
    // Checked before the copy too, so a revoked export leaves nothing under exports/.
    if !authorised(ctx, job, &resolved).await? {
        return Err(revoked());
    }
    match store.copy_if_not_exists(&staging, &key).await {
        Ok(()) | Err(object_store::Error::AlreadyExists { .. }) => {}
        Err(e) => return Err(storage(e)),
    }
    if !authorised(ctx, job, &resolved).await? {
        return Err(revoked());
    }
    let artifact = Artifact { key: key.to_string(), sha256, bytes, rows };
    ctx.faults.check("before_release", &job.id).map_err(|_| storage("injected"))?;
    if queue::release(ctx, job, &artifact).await.map_err(internal)? {
        Ok(())
    } else {
        // Not ours to release: cancel asked (the failure path turns it into cancelled) or lost.
        Err(Stop::Cancelled)
    }
}

/// A CSV writer with RFC 4180 line ends that appends to `buf`.
fn csv_writer(buf: Vec<u8>) -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).from_writer(buf)
}

/// Records progress; a zero-row answer means the job is no longer ours to write (lost or cancelled).
async fn record_progress(ctx: &WorkerContext, job: &exports::Model, rows: i64, total: i64) -> Result<(), Stop> {
    if queue::progress(ctx, &job.id, job.generation, rows, total).await.map_err(internal)? {
        return Ok(());
    }
    match queue::heartbeat(ctx, &job.id, job.generation).await.map_err(internal)? {
        Heartbeat::CancelRequested => Err(Stop::Cancelled),
        _ => Err(Stop::Lost),
    }
}

fn parse_ms(rfc3339: &str) -> Result<i64, Stop> {
    rfc3339.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(internal)
}

fn from_clause(report: &str) -> &'static str {
    match report {
        "orders" => " FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.tenant_id = ",
        _ => " FROM customers c WHERE c.tenant_id = ",
    }
}

fn time_column(report: &str) -> &'static str {
    match report {
        "orders" => "o.placed_at",
        _ => "c.created_at",
    }
}

fn row_id(report: &str) -> &'static str {
    match report {
        "orders" => "o.id",
        _ => "c.id",
    }
}

/// An amount in minor units: a whole number of cents as written (1.10 → 110, despite binary
/// floating point), otherwise rounded with `round` (ceil for a lower bound, floor for an upper).
fn to_cents(amount: f64, round: fn(f64) -> f64) -> i64 {
    let cents = amount * 100.0;
    if (cents - cents.round()).abs() < 1e-6 {
        cents.round() as i64
    } else {
        round(cents) as i64
    }
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Appends the tenant, the interval and the request's filters.
fn push_where(q: &mut Sql, job: &exports::Model, request: &ExportRequest, from: i64, to: i64) {
    let report = job.report.as_str();
    q.push(from_clause(report)).bind(job.tenant_id.clone());
    q.push(&format!(" AND {} >= ", time_column(report))).bind(from);
    q.push(&format!(" AND {} < ", time_column(report))).bind(to);
    let prefix = if report == "orders" { "o" } else { "c" };
    for (name, value) in &request.filters {
        match name.as_str() {
            "status" => {
                q.push(&format!(" AND {prefix}.status IN ")).bind_list(&strings(value));
            }
            "country" => {
                q.push(&format!(" AND {prefix}.country IN ")).bind_list(&strings(value));
            }
            "min_total" => {
                let cents = to_cents(value.as_f64().unwrap_or(0.0), f64::ceil);
                q.push(" AND o.total_cents >= ").bind(cents);
            }
            "max_total" => {
                let cents = to_cents(value.as_f64().unwrap_or(0.0), f64::floor);
                q.push(" AND o.total_cents <= ").bind(cents);
            }
            _ => {}
        }
    }
}

async fn count_rows(txn: &DatabaseTransaction, job: &exports::Model, request: &ExportRequest, from: i64, to: i64) -> Result<i64, Stop> {
    let mut q = Sql::new(txn.get_database_backend());
    q.push("SELECT COUNT(*) AS n");
    push_where(&mut q, job, request, from, to);
    let row = txn.query_one_raw(q.build()).await.map_err(internal)?.ok_or_else(|| internal("COUNT returned no row"))?;
    row.try_get::<i64>("", "n").map_err(internal)
}

#[allow(clippy::too_many_arguments)]
async fn fetch_page(
    txn: &DatabaseTransaction,
    job: &exports::Model,
    request: &ExportRequest,
    resolved: &ResolvedContract,
    from: i64,
    to: i64,
    after: i64,
) -> Result<Vec<QueryResult>, Stop> {
    let report = job.report.as_str();
    let mut select = format!("SELECT {} AS row_id", row_id(report));
    for column in &resolved.columns {
        let (expr, _) = source(report, column).ok_or_else(|| internal(format!("no source for column {column}")))?;
        select.push_str(&format!(", {expr} AS {column}"));
    }
    let mut q = Sql::new(txn.get_database_backend());
    q.push(&select);
    push_where(&mut q, job, request, from, to);
    q.push(&format!(" AND {} > ", row_id(report))).bind(after);
    q.push(&format!(" ORDER BY {} LIMIT {PAGE_ROWS}", row_id(report)));
    txn.query_all_raw(q.build()).await.map_err(internal)
}

fn cell(row: &QueryResult, report: &str, column: &str) -> Result<String, Stop> {
    let (_, kind) = source(report, column).ok_or_else(|| internal(format!("no source for column {column}")))?;
    Ok(match kind {
        Source::Int => row.try_get::<i64>("", column).map_err(internal)?.to_string(),
        Source::Millis => instant(row.try_get::<i64>("", column).map_err(internal)?),
        Source::Money => money(row.try_get::<i64>("", column).map_err(internal)?),
        Source::Text => defuse(&row.try_get::<String>("", column).map_err(internal)?).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::to_cents;

    #[test]
    fn amounts_with_whole_cents_convert_exactly_despite_binary_floats() {
        assert_eq!(to_cents(1.10, f64::ceil), 110);
        assert_eq!(to_cents(1.13, f64::floor), 113);
        assert_eq!(to_cents(-12.5, f64::ceil), -1250);
        assert_eq!(to_cents(1.105, f64::ceil), 111);
        assert_eq!(to_cents(1.105, f64::floor), 110);
    }
}
