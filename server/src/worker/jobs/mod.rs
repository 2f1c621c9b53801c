//! The jobs a worker runs. There is one kind today: producing a CSV export.

pub mod export_csv;
