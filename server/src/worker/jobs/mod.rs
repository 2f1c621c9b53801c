//! The jobs a worker runs, one module per kind of job (see [`JobKind`]): producing a CSV export,
//! as one file (`export_csv`) or in checkpointed parts delivered as a bundle (`export_parts`), both
//! over what every export attempt does (`export_attempt`), and
//! validating and applying an import (`import_csv`), reading its files (`import_file`) and
//! writing its report for every ending (`import_report`).
//! Claims, leases, fencing and the transitions that end an attempt are the job store's, the
//! same for every kind.

mod attempt;
mod duplicate_keys;
mod export_attempt;
pub mod export_csv;
pub mod export_parts;
pub mod import_csv;
mod import_file;
mod import_workbook;
pub mod import_writes;
pub mod import_report;

use crate::entities::jobs;
use crate::job_store::kind::JobKind;
use crate::worker::WorkerContext;

/// Runs one claimed job, by its kind, to the end of its attempt.
pub async fn run(ctx: &WorkerContext, job: jobs::Model) {
    match JobKind::parse(&job.kind) {
        Some(JobKind::Export) => export_csv::run(ctx, job).await,
        Some(JobKind::Import) => import_csv::run(ctx, job).await,
        // A kind this build does not know (a newer one's): its lease expires and the janitor
        // ends it like any lost attempt.
        None => {
            tracing::error!(job = %job.id, kind = %job.kind, "no job of this kind runs in this worker");
        }
    }
}
