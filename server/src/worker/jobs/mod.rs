//! The jobs a worker runs. There is one kind today: producing a CSV export, as one file
//! (`export_csv`) or in checkpointed parts delivered as a bundle (`export_parts`).

pub mod export_csv;
pub mod export_parts;
