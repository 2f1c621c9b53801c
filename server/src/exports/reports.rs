//! The report registry (SPEC §3.1): each report's columns with their types, PII flags and the
//! SQL that reads them, its filters, its time column and its source tables. Validation,
//! resolution and the worker's snapshot query all read from here, and nowhere else.

/// How a column's cells are read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Free text; defused against formula injection.
    Text,
    /// A whole number, written as is.
    Integer,
    /// Money stored in minor units, written as a decimal (a negative total stays `-12.50`).
    Money,
    /// An instant stored as epoch milliseconds, written as RFC 3339 UTC.
    Timestamp,
}

/// One column of a report.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSpec {
    /// The column's name in requests and in the header row.
    pub name: &'static str,
    /// How cells are read and written.
    pub ty: ColumnType,
    /// Personal data: only roles that may read PII get it.
    pub pii: bool,
    /// The SQL expression that reads it, over the report's [`ReportSpec::source`].
    pub sql: &'static str,
}

/// What values a filter takes.
#[derive(Debug, Clone, Copy)]
pub enum FilterKind {
    /// A non-empty set of these strings.
    OneOf(&'static [&'static str]),
    /// A non-empty set of ISO 3166-1 alpha-2 codes.
    Countries,
    /// A money amount (a JSON number).
    Amount,
}

/// How a filter's value selects rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterTest {
    /// The column's value is one of the filter's.
    In,
    /// The column's value is at least the filter's (money, in minor units).
    AtLeast,
    /// The column's value is at most the filter's (money, in minor units).
    AtMost,
}

/// One filter of a report.
#[derive(Debug, Clone, Copy)]
pub struct FilterSpec {
    /// The filter's name.
    pub name: &'static str,
    /// Its values.
    pub kind: FilterKind,
    /// How it selects rows.
    pub test: FilterTest,
    /// The SQL expression it tests.
    pub sql: &'static str,
}

/// A table joined to complete each row.
#[derive(Debug)]
pub struct Join {
    /// The joined table.
    pub table: &'static str,
    /// Its alias.
    pub alias: &'static str,
    /// The join condition; it names the tenant, so a row can never be completed with another
    /// tenant's data.
    pub on: &'static str,
    /// Whether exactly one row matches each main row (a foreign key guarantees it), so that
    /// counting the main table's rows counts the report's.
    pub one_per_row: bool,
}

/// The tables a report reads: one table, and the joins that complete each row.
#[derive(Debug)]
pub struct Source {
    /// The main table and its alias.
    pub table: (&'static str, &'static str),
    /// Joined tables.
    pub joins: &'static [Join],
    /// The main table's tenant column.
    pub tenant_sql: &'static str,
    /// The order of the file's rows: the main table's key.
    pub order_sql: &'static str,
}

/// A report that can be exported.
#[derive(Debug)]
pub struct ReportSpec {
    /// The report's name.
    pub name: &'static str,
    /// The column the time range applies to.
    pub time_column: &'static str,
    /// The columns, in file order.
    pub columns: &'static [ColumnSpec],
    /// The filters.
    pub filters: &'static [FilterSpec],
    /// Where its rows come from.
    pub source: Source,
}

const fn col(name: &'static str, ty: ColumnType, pii: bool, sql: &'static str) -> ColumnSpec {
    ColumnSpec { name, ty, pii, sql }
}

use ColumnType::{Integer, Money, Text, Timestamp};

/// The order statuses.
pub const ORDER_STATUSES: &[&str] = &["paid", "pending", "refunded", "cancelled"];

/// `orders`: one row per order, with its customer.
pub static ORDERS: ReportSpec = ReportSpec {
    name: "orders",
    time_column: "placed_at",
    columns: &[
        col("order_id", Integer, false, "o.id"),
        col("placed_at", Timestamp, false, "o.placed_at"),
        col("customer_id", Integer, false, "o.customer_id"),
        col("customer_name", Text, false, "c.name"),
        col("customer_email", Text, true, "c.email"),
        col("customer_phone", Text, true, "c.phone"),
        col("country", Text, false, "o.country"),
        col("status", Text, false, "o.status"),
        col("total", Money, false, "o.total_cents"),
        col("currency", Text, false, "o.currency"),
        col("notes", Text, false, "o.notes"),
        col("order_ref", Text, false, "o.order_ref"),
    ],
    filters: &[
        FilterSpec { name: "status", kind: FilterKind::OneOf(ORDER_STATUSES), test: FilterTest::In, sql: "o.status" },
        FilterSpec { name: "country", kind: FilterKind::Countries, test: FilterTest::In, sql: "o.country" },
        FilterSpec { name: "min_total", kind: FilterKind::Amount, test: FilterTest::AtLeast, sql: "o.total_cents" },
        FilterSpec { name: "max_total", kind: FilterKind::Amount, test: FilterTest::AtMost, sql: "o.total_cents" },
    ],
    source: Source {
        table: ("orders", "o"),
        // `orders (tenant_id, customer_id)` references `customers (tenant_id, id)`.
        joins: &[Join { table: "customers", alias: "c", on: "c.tenant_id = o.tenant_id AND c.id = o.customer_id", one_per_row: true }],
        tenant_sql: "o.tenant_id",
        order_sql: "o.id",
    },
};

/// `customers`: one row per customer.
pub static CUSTOMERS: ReportSpec = ReportSpec {
    name: "customers",
    time_column: "created_at",
    columns: &[
        col("customer_id", Integer, false, "c.id"),
        col("created_at", Timestamp, false, "c.created_at"),
        col("name", Text, false, "c.name"),
        col("email", Text, true, "c.email"),
        col("phone", Text, true, "c.phone"),
        col("country", Text, false, "c.country"),
        col("lifetime_total", Money, false, "c.lifetime_total_cents"),
    ],
    filters: &[FilterSpec { name: "country", kind: FilterKind::Countries, test: FilterTest::In, sql: "c.country" }],
    source: Source { table: ("customers", "c"), joins: &[], tenant_sql: "c.tenant_id", order_sql: "c.id" },
};

/// Every report.
pub static REPORTS: &[&ReportSpec] = &[&ORDERS, &CUSTOMERS];

/// The report of this name.
pub fn find_report(name: &str) -> Option<&'static ReportSpec> {
    REPORTS.iter().copied().find(|r| r.name == name)
}

impl ReportSpec {
    /// The column of this name.
    pub fn column(&self, name: &str) -> Option<&'static ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The filter of this name.
    pub fn filter(&self, name: &str) -> Option<&'static FilterSpec> {
        self.filters.iter().find(|f| f.name == name)
    }

    /// The SQL of the time column.
    pub fn time_sql(&self) -> &'static str {
        self.column(self.time_column).map_or("NULL", |c| c.sql)
    }

    /// Whether these columns include a PII column; `None` if one is not a column of the report.
    pub fn needs_pii(&self, columns: &[String]) -> Option<bool> {
        columns.iter().try_fold(false, |pii, name| self.column(name).map(|c| pii || c.pii))
    }
}

/// ISO 3166-1 alpha-2 codes, officially assigned.
const ISO_COUNTRIES: &str = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW";

/// Whether `code` is an assigned ISO 3166-1 alpha-2 code.
pub fn is_country(code: &str) -> bool {
    // A set built once: splitting the list for every cell was most of an import's validation.
    static CODES: std::sync::LazyLock<std::collections::HashSet<&'static str>> = std::sync::LazyLock::new(|| ISO_COUNTRIES.split(' ').collect());
    code.len() == 2 && CODES.contains(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_reads_its_time_column_and_its_tenant_from_the_registry() {
        for report in REPORTS {
            let time = report.column(report.time_column).expect("the time column is a column");
            assert_eq!(time.ty, ColumnType::Timestamp, "{}", report.name);
            assert_eq!(report.time_sql(), time.sql);
            let alias = report.source.table.1;
            assert!(report.source.tenant_sql.starts_with(&format!("{alias}.")), "{}", report.name);
            for join in report.source.joins {
                assert!(join.on.contains(&format!("{}.tenant_id = {alias}.tenant_id", join.alias)), "{}: join {} names the tenant", report.name, join.alias);
            }
            for c in report.columns {
                let table = c.sql.split('.').next().unwrap();
                assert!(table == alias || report.source.joins.iter().any(|j| j.alias == table), "{}.{} reads from its source", report.name, c.name);
            }
        }
    }

    #[test]
    fn pii_is_known_only_for_the_reports_own_columns() {
        let cols = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(ORDERS.needs_pii(&cols(&["order_id", "total"])), Some(false));
        assert_eq!(ORDERS.needs_pii(&cols(&["order_id", "customer_email"])), Some(true));
        assert_eq!(ORDERS.needs_pii(&cols(&["order_id", "email"])), None);
    }
}
