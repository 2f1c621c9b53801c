//! The snapshot an export is written from (SPEC §5.4): one read transaction (REPEATABLE READ
//! READ ONLY on PostgreSQL, one read transaction on SQLite) in which the rows are counted and
//! then streamed by a single query built from the report registry. The file shows the data as
//! of the worker's snapshot, whatever changes meanwhile.

use crate::exports::reports::{ColumnSpec, ColumnType, FilterTest, ReportSpec};
use crate::worker::csv_cells::CsvEncoder;
use app::{ExportRequest, ResolvedContract};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, JoinType, Order, Query, SelectStatement};
use sea_orm::{AccessMode, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, IsolationLevel, QueryResult, Statement, TransactionTrait};

/// The two queries of one export's snapshot.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The file's columns, in order.
    pub columns: Vec<&'static ColumnSpec>,
    count: SelectStatement,
    rows: SelectStatement,
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

fn millis(rfc3339: &str) -> Result<i64, String> {
    rfc3339.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| format!("stored instant {rfc3339:?}: {e}"))
}

impl Plan {
    /// The queries of an export of `report` for `tenant_id`, as the operation was resolved.
    pub fn new(report: &'static ReportSpec, request: &ExportRequest, resolved: &ResolvedContract, tenant_id: &str) -> Result<Plan, String> {
        let columns = resolved
            .columns
            .iter()
            .map(|name| report.column(name).ok_or_else(|| format!("{} has no column {name:?}", report.name)))
            .collect::<Result<Vec<_>, _>>()?;
        let (table, alias) = report.source.table;
        let mut base = Query::select();
        base.from_as(Alias::new(table), Alias::new(alias));
        for (table, alias, on) in report.source.joins {
            base.join_as(JoinType::InnerJoin, Alias::new(*table), Alias::new(*alias), Expr::cust(*on));
        }
        base.and_where(Expr::cust(report.source.tenant_sql).eq(tenant_id))
            .and_where(Expr::cust(report.time_sql()).gte(millis(&resolved.from)?))
            .and_where(Expr::cust(report.time_sql()).lt(millis(&resolved.to)?));
        for (name, value) in &request.filters {
            let filter = report.filter(name).ok_or_else(|| format!("{} has no filter {name:?}", report.name))?;
            let amount = || value.as_f64().ok_or_else(|| format!("filter {name} is not a number"));
            let test = match filter.test {
                FilterTest::In => Expr::cust(filter.sql).is_in(strings(value)),
                FilterTest::AtLeast => Expr::cust(filter.sql).gte(to_cents(amount()?, f64::ceil)),
                FilterTest::AtMost => Expr::cust(filter.sql).lte(to_cents(amount()?, f64::floor)),
            };
            base.and_where(test);
        }
        let mut count = base.clone();
        count.expr(Expr::cust("COUNT(*)"));
        let mut rows = base;
        for column in &columns {
            rows.expr(Expr::cust(column.sql));
        }
        rows.order_by_expr(Expr::cust(report.source.order_sql), Order::Asc);
        Ok(Plan { columns, count, rows })
    }

    /// The query that counts the rows.
    pub fn count_statement(&self, backend: DbBackend) -> Statement {
        backend.build(&self.count)
    }

    /// The query that reads the rows, in file order.
    pub fn rows_statement(&self, backend: DbBackend) -> Statement {
        backend.build(&self.rows)
    }

    /// Writes one row of the rows query as a CSV record.
    pub fn write_row(&self, row: &QueryResult, csv: &mut CsvEncoder) -> Result<(), RowError> {
        for (i, column) in self.columns.iter().enumerate() {
            match column.ty {
                ColumnType::Text => csv.text(&row.try_get_by_index::<String>(i)?)?,
                ColumnType::Integer => csv.integer(row.try_get_by_index::<i64>(i)?)?,
                ColumnType::Money => csv.money(row.try_get_by_index::<i64>(i)?)?,
                ColumnType::Timestamp => csv.instant(row.try_get_by_index::<i64>(i)?)?,
            }
        }
        Ok(csv.end_row()?)
    }
}

/// A row that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// A cell did not decode.
    #[error("reading a cell: {0}")]
    Read(#[from] DbErr),
    /// The CSV writer failed.
    #[error("writing CSV: {0}")]
    Write(#[from] std::io::Error),
}

/// Opens the snapshot's read transaction.
pub async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    match db.get_database_backend() {
        DbBackend::Postgres => db.begin_with_config(Some(IsolationLevel::RepeatableRead), Some(AccessMode::ReadOnly)).await,
        _ => db.begin().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::reports::ORDERS;

    #[test]
    fn amounts_with_whole_cents_convert_exactly_despite_binary_floats() {
        assert_eq!(to_cents(1.10, f64::ceil), 110);
        assert_eq!(to_cents(1.13, f64::floor), 113);
        assert_eq!(to_cents(-12.5, f64::ceil), -1250);
        assert_eq!(to_cents(1.105, f64::ceil), 111);
        assert_eq!(to_cents(1.105, f64::floor), 110);
    }

    #[test]
    fn the_snapshot_query_reads_the_registry_columns_of_the_tenant_in_its_interval() {
        let mut request = ExportRequest::new("orders");
        request.filters.insert("status".into(), serde_json::json!(["paid"]));
        request.filters.insert("min_total".into(), serde_json::json!(1.10));
        let resolved = ResolvedContract {
            from: "2026-01-01T00:00:00Z".into(),
            to: "2026-01-02T00:00:00Z".into(),
            timezone: "UTC".into(),
            columns: vec!["order_id".into(), "customer_name".into(), "total".into()],
            deployment: "ksa".into(),
        };
        let plan = Plan::new(&ORDERS, &request, &resolved, "ten_acme").unwrap();
        let rows = plan.rows_statement(DbBackend::Postgres);
        assert_eq!(
            rows.sql,
            "SELECT o.id, c.name, o.total_cents FROM \"orders\" AS \"o\" INNER JOIN \"customers\" AS \"c\" ON c.tenant_id = o.tenant_id AND c.id = o.customer_id \
             WHERE (o.tenant_id) = $1 AND (o.placed_at) >= $2 AND (o.placed_at) < $3 AND (o.total_cents) >= $4 AND (o.status) IN ($5) ORDER BY o.id ASC"
        );
        let count = plan.count_statement(DbBackend::Sqlite);
        assert!(count.sql.starts_with("SELECT COUNT(*) FROM \"orders\" AS \"o\" INNER JOIN"), "{}", count.sql);
        assert_eq!(plan.columns.len(), 3);
    }
}
