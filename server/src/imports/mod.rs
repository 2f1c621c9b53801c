//! Imports (SPEC §10): the files users send (`uploads`) and, on the job store every kind of job
//! shares, the import jobs that validate and apply them.

pub mod cells;
pub mod service;
pub mod stored;
pub mod uploads;
