//! Prometheus metrics (`GET /metrics`, SPEC §3), with the `prometheus` crate. Counters count what
//! this process did (its API, its worker, its janitor); the exports by state and the age of the
//! oldest export in each state come from the database at each scrape, so every instance tells the
//! same truth about them.

use app::ExportStatus;
use crate::job_store::kind::JobKind;
use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use sea_orm::{ConnectionTrait, DbErr, Statement};
use std::ops::Deref;
use std::sync::Arc;

/// Why a worker's release did not happen, as the `reason` label names it.
pub mod release_lost {
    /// The job was no longer this attempt's (lease lapsed, generation moved on).
    pub const LOST: &str = "lost";
    /// Cancel was asked.
    pub const CANCEL_REQUESTED: &str = "cancel_requested";
    /// The actor is no longer authorised.
    pub const REVOKED: &str = "revoked";
}

/// The metrics of one process; cheap to clone, shared by its API, worker and janitor.
#[derive(Clone)]
pub struct Metrics(Arc<Counters>);

/// The counters and the histogram of a process.
pub struct Counters {
    registry: Registry,
    /// Jobs claimed by this process's workers.
    pub claims: IntCounter,
    /// Jobs whose lease expired, ended by this process's janitor.
    pub lease_reclaims: IntCounter,
    /// Attempts ended `stalled` (no progress while the lease was renewed) by this process's
    /// worker or janitor.
    pub stalled_attempts: IntCounter,
    /// Creates answered as a replay of the operation bound to the key.
    pub replays: IntCounter,
    /// Creates refused because the key is bound to a different request.
    pub key_reuse_conflicts: IntCounter,
    /// Writes of a worker refused by the generation fence (the job was no longer its own).
    pub fenced_writes_rejected: IntCounter,
    /// Releases that did not happen, by reason.
    pub releases_lost: IntCounterVec,
    /// Rows in released files.
    pub rows_exported: IntCounter,
    /// Bytes of released files.
    pub bytes_exported: IntCounter,
    /// Seconds from claim to release of the attempts that released.
    pub export_duration: Histogram,
    /// Rows applied by imports (committed batches; dry runs not counted).
    pub rows_imported: IntCounter,
    /// Rows imports reported as invalid or refused.
    pub rows_rejected: IntCounter,
    /// Import batches rolled back after a bounded wait (a lock, a deadlock) and run again.
    pub import_batch_waits: IntCounter,
    /// Reports written for imports that ended failed or cancelled.
    pub import_reports_settled: IntCounter,
    /// HTTP answers by route (its pattern) and status.
    pub http_requests: IntCounterVec,
    /// Schedule runs this process's scheduler loop created, by schedule.
    pub schedule_runs: IntCounterVec,
    /// Seconds from a window's due time to the creation of its run.
    pub schedule_lag: Histogram,
    /// Notification attempts by channel (`webhook`, `email`) and outcome (`delivered`,
    /// `retried`, `failed`).
    pub deliveries: IntCounterVec,
    exports: IntGaugeVec,
    imports: IntGaugeVec,
    oldest: IntGaugeVec,
    checkpoint_stall: prometheus::IntGauge,
}

impl Deref for Metrics {
    type Target = Counters;
    fn deref(&self) -> &Counters {
        &self.0
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh set, in a registry of its own (so test apps in one process do not share counts).
    pub fn new() -> Metrics {
        let registry = Registry::new();
        fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
            let c = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            r.register(Box::new(c.clone())).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            c
        }
        fn counters(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
            let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            r.register(Box::new(c.clone())).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            c
        }
        fn gauges(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
            let g = IntGaugeVec::new(Opts::new(name, help), &["state"]).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            r.register(Box::new(g.clone())).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            g
        }
        let buckets = vec![0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
        let export_duration = Histogram::with_opts(HistogramOpts::new("exportd_export_duration_seconds", "Seconds from claim to release of released attempts").buckets(buckets))
            .unwrap_or_else(|e| panic!("metric exportd_export_duration_seconds: {e}"));
        registry.register(Box::new(export_duration.clone())).unwrap_or_else(|e| panic!("metric exportd_export_duration_seconds: {e}"));
        let lag_buckets = vec![0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86_400.0];
        let schedule_lag = Histogram::with_opts(HistogramOpts::new("exportd_schedule_lag_seconds", "Seconds from a window's due time to the creation of its run").buckets(lag_buckets))
            .unwrap_or_else(|e| panic!("metric exportd_schedule_lag_seconds: {e}"));
        registry.register(Box::new(schedule_lag.clone())).unwrap_or_else(|e| panic!("metric exportd_schedule_lag_seconds: {e}"));
        let r = &registry;
        // The names and labels above are constants, so registering cannot fail at run time; a
        // clash is a programming error found by the first test.
        Metrics(Arc::new(Counters {
            claims: counter(r, "exportd_claims_total", "Jobs claimed by this process's workers"),
            lease_reclaims: counter(r, "exportd_lease_reclaims_total", "Jobs whose lease expired, ended by this process's janitor"),
            stalled_attempts: counter(r, "exportd_stalled_attempts_total", "Attempts ended stalled (no progress while the lease was renewed) by this process"),
            replays: counter(r, "exportd_idempotency_replays_total", "Creates answered as a replay of the operation bound to the key"),
            key_reuse_conflicts: counter(r, "exportd_idempotency_key_reuse_conflicts_total", "Creates refused: the key is bound to a different request"),
            fenced_writes_rejected: counter(r, "exportd_fenced_writes_rejected_total", "Worker writes refused by the generation fence"),
            releases_lost: counters(r, "exportd_releases_lost_total", "Releases that did not happen, by reason", &["reason"]),
            rows_exported: counter(r, "exportd_rows_exported_total", "Rows in released files"),
            bytes_exported: counter(r, "exportd_bytes_exported_total", "Bytes of released files"),
            rows_imported: counter(r, "exportd_rows_imported_total", "Rows applied by imports that finished"),
            rows_rejected: counter(r, "exportd_rows_rejected_total", "Rows imports reported invalid or refused"),
            import_batch_waits: counter(r, "exportd_import_batch_waits_total", "Import batches rolled back after a bounded wait and run again"),
            import_reports_settled: counter(r, "exportd_import_reports_settled_total", "Reports written for imports that ended failed or cancelled"),
            http_requests: counters(r, "exportd_http_requests_total", "HTTP answers by route and status", &["route", "status"]),
            schedule_runs: counters(r, "exportd_schedule_runs_total", "Schedule runs this process's scheduler created, by schedule", &["schedule"]),
            schedule_lag,
            deliveries: counters(r, "exportd_notification_deliveries_total", "Notification attempts by channel and outcome (delivered, retried, failed)", &["channel", "outcome"]),
            exports: gauges(r, "exportd_exports", "Exports in the database by state"),
            imports: gauges(r, "exportd_imports", "Imports in the database by state"),
            oldest: gauges(r, "exportd_oldest_export_age_seconds", "Age of the oldest export in each state (0 when none)"),
            checkpoint_stall: {
                let g = prometheus::IntGauge::new("exportd_checkpoint_stall_seconds", "Seconds since the running job that progressed least recently last made progress (0 when none runs)")
                    .unwrap_or_else(|e| panic!("metric exportd_checkpoint_stall_seconds: {e}"));
                r.register(Box::new(g.clone())).unwrap_or_else(|e| panic!("metric exportd_checkpoint_stall_seconds: {e}"));
                g
            },
            export_duration,
            registry,
        }))
    }

    /// The Prometheus text of every metric, with the states read from the database now.
    pub async fn render<C: ConnectionTrait>(&self, db: &C) -> Result<String, DbErr> {
        let backend = db.get_database_backend();
        let now = crate::db::now_ms_sql(backend);
        let sql = format!("SELECT kind, status, COUNT(*) AS n, {now} - MIN(created_at) AS age_ms, {now} - MIN(last_progress_at) AS quiet_ms FROM jobs GROUP BY kind, status");
        let rows = db.query_all_raw(Statement::from_string(backend, sql)).await?;
        for state in ExportStatus::ALL {
            self.exports.with_label_values(&[state.as_str()]).set(0);
            self.imports.with_label_values(&[state.as_str()]).set(0);
            self.oldest.with_label_values(&[state.as_str()]).set(0);
        }
        let mut quiet_ms = 0i64;
        for row in rows {
            let kind: String = row.try_get("", "kind")?;
            let state: String = row.try_get("", "status")?;
            let n: i64 = row.try_get("", "n")?;
            let age_ms: i64 = row.try_get("", "age_ms")?;
            match JobKind::parse(&kind) {
                Some(JobKind::Export) => {
                    self.exports.with_label_values(&[state.as_str()]).set(n);
                    self.oldest.with_label_values(&[state.as_str()]).set(age_ms.max(0) / 1000);
                }
                Some(JobKind::Import) => self.imports.with_label_values(&[state.as_str()]).set(n),
                None => {}
            }
            if matches!(ExportStatus::parse(&state), Some(ExportStatus::Running | ExportStatus::CancelRequested)) {
                quiet_ms = quiet_ms.max(row.try_get::<Option<i64>>("", "quiet_ms")?.unwrap_or(0));
            }
        }
        self.checkpoint_stall.set(quiet_ms.max(0) / 1000);
        let mut text = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut text).map_err(|e| DbErr::Custom(format!("metrics encoding: {e}")))?;
        String::from_utf8(text).map_err(|e| DbErr::Custom(format!("metrics encoding: {e}")))
    }
}
