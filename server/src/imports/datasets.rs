//! The datasets an import writes (SPEC §10) and the rules of their cells: which columns a file
//! may have, which one is the key, which ones an export writes that an import ignores, and how
//! each cell is read, with the code and message of every way it can be wrong. What needs the
//! database (a `customer_email` that names no customer, a row the database refuses) is checked
//! by the import job; everything here is a pure function of the file.

use crate::service::ids::could_be_email;
use crate::iso_codes::is_country;
use crate::csv_cells::undefuse;

/// A dataset an import writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// `customers`, keyed by email (trimmed, lower-cased) per tenant.
    Customers,
    /// `orders`, keyed by `order_ref` per tenant.
    Orders,
}

/// How a cell is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellKind {
    /// An email address (a key or a reference): stored as sent, compared by its key.
    Email,
    /// Free text of at most this many characters.
    Text(usize),
    /// An ISO 3166-1 alpha-2 code.
    Country,
    /// 1–64 printable characters.
    OrderRef,
    /// RFC 3339 with an offset.
    Instant,
    /// One of the order statuses.
    Status,
    /// A decimal with at most two places.
    Money,
    /// An ISO 4217 code: three capital letters.
    Currency,
}

/// One column an import may set.
#[derive(Debug, Clone, Copy)]
pub struct ColumnRule {
    /// Its name in the header row.
    pub name: &'static str,
    /// How its cells are read.
    pub kind: CellKind,
}

const fn rule(name: &'static str, kind: CellKind) -> ColumnRule {
    ColumnRule { name, kind }
}

/// The order statuses.
pub const ORDER_STATUSES: &[&str] = &["paid", "pending", "refunded", "cancelled"];

/// The longest text cell, but `notes`.
pub const TEXT_MAX: usize = 1_000;
/// The longest `notes`.
pub const NOTES_MAX: usize = 10_000;

const CUSTOMERS: &[ColumnRule] = &[
    rule("email", CellKind::Email),
    rule("name", CellKind::Text(TEXT_MAX)),
    rule("phone", CellKind::Text(TEXT_MAX)),
    rule("country", CellKind::Country),
];

const ORDERS: &[ColumnRule] = &[
    rule("order_ref", CellKind::OrderRef),
    rule("customer_email", CellKind::Email),
    rule("placed_at", CellKind::Instant),
    rule("country", CellKind::Country),
    rule("status", CellKind::Status),
    rule("total", CellKind::Money),
    rule("currency", CellKind::Currency),
    rule("notes", CellKind::Text(NOTES_MAX)),
];

impl Dataset {
    /// Every dataset.
    pub const ALL: [Dataset; 2] = [Dataset::Customers, Dataset::Orders];

    /// The dataset's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dataset::Customers => "customers",
            Dataset::Orders => "orders",
        }
    }

    /// The dataset of this name.
    pub fn parse(name: &str) -> Option<Dataset> {
        Dataset::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// The columns an import may set; the first is the key.
    pub fn columns(self) -> &'static [ColumnRule] {
        match self {
            Dataset::Customers => CUSTOMERS,
            Dataset::Orders => ORDERS,
        }
    }

    /// The columns the matching export report writes that an import cannot set: ignored, so an
    /// exported file imports as it is.
    pub fn ignored(self) -> &'static [&'static str] {
        match self {
            Dataset::Customers => &["customer_id", "created_at", "lifetime_total"],
            Dataset::Orders => &["order_id", "customer_id", "customer_name", "customer_phone"],
        }
    }
}

/// Something wrong with a file or a cell: a code and a message for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The column it is about (empty for a whole record).
    pub column: String,
    /// A stable code (`invalid_email`, …).
    pub code: &'static str,
    /// What a person reads.
    pub message: String,
}

impl Problem {
    fn new(column: &str, code: &'static str, message: impl Into<String>) -> Problem {
        Problem { column: column.to_owned(), code, message: message.into() }
    }
}

/// Where each column of a file's header goes.
#[derive(Debug, Clone)]
pub struct Header {
    /// For each position of the file's records: the rule of the column there, or `None` for an
    /// ignored column.
    pub slots: Vec<Option<ColumnRule>>,
}

impl Header {
    /// Reads a header row; a missing key column, an unknown column or a column named twice
    /// fails the whole file.
    pub fn read(dataset: Dataset, names: &[&str]) -> Result<Header, Problem> {
        let mut slots = Vec::with_capacity(names.len());
        let mut seen: Vec<&str> = Vec::with_capacity(names.len());
        for (i, raw) in names.iter().enumerate() {
            // The first name may carry a BOM the reader did not take.
            let name = if i == 0 { raw.trim_start_matches('\u{feff}') } else { raw };
            let name = name.trim();
            if seen.contains(&name) {
                return Err(Problem::new(name, "duplicate_column", format!("the column {name:?} is named twice")));
            }
            seen.push(name);
            if let Some(rule) = dataset.columns().iter().find(|r| r.name == name) {
                slots.push(Some(*rule));
            } else if dataset.ignored().contains(&name) {
                slots.push(None);
            } else {
                return Err(Problem::new(name, "unknown_column", format!("{name:?} is not a column of {}", dataset.as_str())));
            }
        }
        let key = dataset.columns()[0].name;
        if !seen.contains(&key) {
            return Err(Problem::new(key, "missing_key_column", format!("the key column {key:?} is missing")));
        }
        Ok(Header { slots })
    }
}

/// A cell read by its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Text as stored (an email as sent, trimmed).
    Text(String),
    /// Epoch milliseconds, and whether the file gave a fraction of a second (an instant without
    /// one equals a stored one to the second).
    Instant(i64, bool),
    /// Minor units.
    Cents(i64),
}

fn has_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\r' | '\n'))
}

/// Reads one cell (as the file has it, an export's defusing undone) by `rule`.
pub fn read_cell(rule: ColumnRule, raw: &str) -> Result<Value, Problem> {
    let name = rule.name;
    let cell = undefuse(raw);
    if has_control(cell) {
        return Err(Problem::new(name, "control_character", "a control character other than tab, CR or LF"));
    }
    let required = |code: &'static str, what: &str| Problem::new(name, code, format!("{what} is required"));
    match rule.kind {
        CellKind::Text(max) => {
            let chars = cell.chars().count();
            if chars > max {
                return Err(Problem::new(name, "too_long", format!("{chars} characters; at most {max}")));
            }
            Ok(Value::Text(cell.to_owned()))
        }
        CellKind::Email => {
            let email = cell.trim();
            if email.is_empty() {
                return Err(required("missing_value", "an email"));
            }
            if !could_be_email(&migrations::email_key(email)) {
                return Err(Problem::new(name, "invalid_email", "not an email address"));
            }
            Ok(Value::Text(email.to_owned()))
        }
        CellKind::Country => {
            if is_country(cell) { Ok(Value::Text(cell.to_owned())) } else { Err(Problem::new(name, "invalid_country", "not an ISO 3166-1 alpha-2 code such as SA")) }
        }
        CellKind::OrderRef => {
            let chars = cell.chars().count();
            if cell.is_empty() {
                return Err(required("missing_value", "an order_ref"));
            }
            if chars > 64 || cell.trim() != cell {
                return Err(Problem::new(name, "invalid_order_ref", "1 to 64 printable characters, no space at either end"));
            }
            Ok(Value::Text(cell.to_owned()))
        }
        CellKind::Instant => match cell.parse::<jiff::Timestamp>() {
            Ok(ts) => Ok(Value::Instant(ts.as_millisecond(), cell.contains('.'))),
            Err(_) => Err(Problem::new(name, "invalid_instant", "not an RFC 3339 instant with an offset, such as 2026-01-31T09:30:00+03:00")),
        },
        CellKind::Status => {
            if ORDER_STATUSES.contains(&cell) { Ok(Value::Text(cell.to_owned())) } else { Err(Problem::new(name, "invalid_status", format!("one of {}", ORDER_STATUSES.join(", ")))) }
        }
        CellKind::Money => money(cell).map(Value::Cents).ok_or_else(|| {
            let code = if cell.split_once('.').is_some_and(|(_, f)| f.len() > 2 && f.bytes().all(|b| b.is_ascii_digit())) { "too_many_decimals" } else { "invalid_amount" };
            Problem::new(name, code, "a decimal with at most two places, such as -12.50")
        }),
        CellKind::Currency => {
            if cell.len() == 3 && cell.bytes().all(|b| b.is_ascii_uppercase()) { Ok(Value::Text(cell.to_owned())) } else { Err(Problem::new(name, "invalid_currency", "an ISO 4217 code such as SAR")) }
        }
    }
}

/// `-12.5` → `-1250`: an optional minus, digits, and at most two decimal places.
fn money(cell: &str) -> Option<i64> {
    let (negative, digits) = match cell.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cell),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || fraction.len() > 2 || (digits.contains('.') && fraction.is_empty()) {
        return None;
    }
    let cents = whole.parse::<i64>().ok()?.checked_mul(100)?.checked_add(format!("{fraction:0<2}").parse::<i64>().ok()?)?;
    Some(if negative { -cents } else { cents })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_of(dataset: Dataset, name: &str) -> ColumnRule {
        *dataset.columns().iter().find(|r| r.name == name).unwrap()
    }

    fn code(dataset: Dataset, column: &str, cell: &str) -> Option<&'static str> {
        read_cell(rule_of(dataset, column), cell).err().map(|p| p.code)
    }

    #[test]
    fn a_header_needs_its_key_and_knows_every_column_ignoring_what_only_an_export_writes() {
        let h = Header::read(Dataset::Customers, &["\u{feff}customer_id", "email", "name", "lifetime_total"]).unwrap();
        assert_eq!(h.slots.iter().map(|s| s.map(|r| r.name)).collect::<Vec<_>>(), vec![None, Some("email"), Some("name"), None]);
        assert_eq!(Header::read(Dataset::Customers, &["name"]).unwrap_err().code, "missing_key_column");
        assert_eq!(Header::read(Dataset::Orders, &["order_ref", "colour"]).unwrap_err().code, "unknown_column");
        assert_eq!(Header::read(Dataset::Orders, &["order_ref", "notes", "notes"]).unwrap_err().code, "duplicate_column");
    }

    #[test]
    fn money_takes_at_most_two_places_and_says_which_rule_a_cell_broke() {
        assert_eq!(money("-12.50"), Some(-1250));
        assert_eq!(money("12.5"), Some(1250));
        assert_eq!(money("7"), Some(700));
        for bad in ["", "-", "1.", ".5", "1,00", "1e3", "12.345", "--1", "9223372036854775807"] {
            assert_eq!(money(bad), None, "{bad:?}");
        }
        assert_eq!(code(Dataset::Orders, "total", "12.345"), Some("too_many_decimals"));
        assert_eq!(code(Dataset::Orders, "total", "twelve"), Some("invalid_amount"));
    }

    #[test]
    fn each_kind_of_cell_refuses_what_it_cannot_store_with_its_own_code() {
        use Dataset::*;
        assert_eq!(code(Customers, "email", "  "), Some("missing_value"));
        assert_eq!(code(Customers, "email", "not-an-email"), Some("invalid_email"));
        assert_eq!(code(Customers, "country", "Saudi"), Some("invalid_country"));
        assert_eq!(code(Customers, "name", "a\u{7}b"), Some("control_character"));
        assert_eq!(code(Customers, "name", &"x".repeat(1001)), Some("too_long"));
        assert_eq!(code(Orders, "notes", &"x".repeat(10_000)), None);
        assert_eq!(code(Orders, "placed_at", "2026-01-31 09:30"), Some("invalid_instant"));
        assert_eq!(code(Orders, "status", "shipped"), Some("invalid_status"));
        assert_eq!(code(Orders, "currency", "sar"), Some("invalid_currency"));
        assert_eq!(code(Orders, "order_ref", ""), Some("missing_value"));
        assert_eq!(code(Orders, "order_ref", &"r".repeat(65)), Some("invalid_order_ref"));
        assert_eq!(read_cell(rule_of(Orders, "placed_at"), "2026-01-31T09:30:00+03:00"), Ok(Value::Instant(1_769_841_000_000, false)));
        assert_eq!(read_cell(rule_of(Customers, "name"), "'=HYPERLINK(x)"), Ok(Value::Text("=HYPERLINK(x)".into())), "an export's defusing is undone");
        assert_eq!(read_cell(rule_of(Customers, "name"), "محمد العتيبي"), Ok(Value::Text("محمد العتيبي".into())));
        assert_eq!(read_cell(rule_of(Customers, "email"), " Ali@Acme.test "), Ok(Value::Text("Ali@Acme.test".into())));
    }
}
