//! The report registry (SPEC §3.1): each report's columns with their types and PII flags, its
//! filters and its time column. The worker's SQL and the validation both read from here.

/// How a column's cells are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Free text; defused against formula injection.
    Text,
    /// A number; written as is (a negative total stays `-12.50`).
    Numeric,
    /// An instant; written as RFC 3339 UTC.
    Timestamp,
}

/// One column of a report.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSpec {
    /// The column's name in requests and in the header row.
    pub name: &'static str,
    /// How cells are written.
    pub ty: ColumnType,
    /// Personal data: only roles that may read PII get it.
    pub pii: bool,
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

/// One filter of a report.
#[derive(Debug, Clone, Copy)]
pub struct FilterSpec {
    /// The filter's name.
    pub name: &'static str,
    /// Its values.
    pub kind: FilterKind,
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
}

const fn col(name: &'static str, ty: ColumnType, pii: bool) -> ColumnSpec {
    ColumnSpec { name, ty, pii }
}

use ColumnType::{Numeric, Text, Timestamp};

/// The order statuses.
pub const ORDER_STATUSES: &[&str] = &["paid", "pending", "refunded", "cancelled"];

/// `orders`: one row per order, with its customer.
pub static ORDERS: ReportSpec = ReportSpec {
    name: "orders",
    time_column: "placed_at",
    columns: &[
        col("order_id", Numeric, false),
        col("placed_at", Timestamp, false),
        col("customer_id", Numeric, false),
        col("customer_name", Text, false),
        col("customer_email", Text, true),
        col("customer_phone", Text, true),
        col("country", Text, false),
        col("status", Text, false),
        col("total", Numeric, false),
        col("currency", Text, false),
        col("notes", Text, false),
    ],
    filters: &[
        FilterSpec { name: "status", kind: FilterKind::OneOf(ORDER_STATUSES) },
        FilterSpec { name: "country", kind: FilterKind::Countries },
        FilterSpec { name: "min_total", kind: FilterKind::Amount },
        FilterSpec { name: "max_total", kind: FilterKind::Amount },
    ],
};

/// `customers`: one row per customer.
pub static CUSTOMERS: ReportSpec = ReportSpec {
    name: "customers",
    time_column: "created_at",
    columns: &[
        col("customer_id", Numeric, false),
        col("created_at", Timestamp, false),
        col("name", Text, false),
        col("email", Text, true),
        col("phone", Text, true),
        col("country", Text, false),
        col("lifetime_total", Numeric, false),
    ],
    filters: &[FilterSpec { name: "country", kind: FilterKind::Countries }],
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
}

/// ISO 3166-1 alpha-2 codes, officially assigned.
const ISO_COUNTRIES: &str = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW";

/// Whether `code` is an assigned ISO 3166-1 alpha-2 code.
pub fn is_country(code: &str) -> bool {
    code.len() == 2 && ISO_COUNTRIES.split(' ').any(|c| c == code)
}
