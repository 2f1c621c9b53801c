use super::*;

fn errors_of(text: &str) -> Vec<String> {
    match parse("bad.toml", text) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_demo_catalog_declares_the_contracts_reports_and_the_registrys_datasets_as_they_are() {
    let demo = Catalog::demo().map_err(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>()).expect("the demo catalog reads");
    // The contract's reports (its section on creating an export): columns in order, PII marked.
    let contract: [(&str, &str, &[&str], &[&str]); 2] = [
        (
            "orders",
            "o.placed_at",
            &["order_id", "placed_at", "customer_id", "customer_name", "customer_email", "customer_phone", "country", "status", "total", "currency", "notes", "order_ref"],
            &["customer_email", "customer_phone"],
        ),
        ("customers", "c.created_at", &["customer_id", "created_at", "name", "email", "phone", "country", "lifetime_total"], &["email", "phone"]),
    ];
    assert_eq!(demo.reports.len(), contract.len());
    for (name, time, columns, pii) in contract {
        let report = demo.report(name).expect("every report of the contract is declared");
        assert_eq!((report.time_sql.as_str(), report.time_unit), (time, TimeUnit::Ms), "{name}");
        assert_eq!(report.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), columns, "{name}");
        assert_eq!(report.columns.iter().filter(|c| c.pii).map(|c| c.name.as_str()).collect::<Vec<_>>(), pii, "{name}");
        assert_eq!(report.roles, Roles { admin: true, analyst: true });
    }
    let orders = demo.report("orders").expect("orders");
    let filters: Vec<(&str, &FilterTest)> = orders.filters.iter().map(|f| (f.name.as_str(), &f.test)).collect();
    let statuses = FilterTest::OneOf { values: ["paid", "pending", "refunded", "cancelled"].map(String::from).to_vec() };
    let money = FilterValue::Money { currency: None };
    assert_eq!(
        filters,
        vec![("status", &statuses), ("country", &FilterTest::Countries), ("min_total", &FilterTest::AtLeast { of: money.clone() }), ("max_total", &FilterTest::AtMost { of: money })]
    );
    // The datasets of contract §10: their columns in order, the first the key, and what an
    // exported file carries that an import ignores.
    let customers = demo.dataset("customers").expect("customers");
    let names = |d: &crate::catalog::Dataset| d.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(customers), ["email", "name", "phone", "country"]);
    assert_eq!(customers.ignore, ["customer_id", "created_at", "lifetime_total"]);
    let orders = demo.dataset("orders").expect("orders");
    assert_eq!(names(orders), ["order_ref", "customer_email", "placed_at", "country", "status", "total", "currency", "notes"]);
    assert_eq!(orders.ignore, ["order_id", "customer_id", "customer_name", "customer_phone"]);
    assert_eq!((customers.key[0].name.as_str(), orders.key[0].name.as_str()), ("email", "order_ref"));
    assert_eq!(orders.column("notes").map(|c| c.max_chars), Some(10_000));
    assert_eq!(orders.column("order_ref").map(|c| c.max_chars), Some(64));
    assert!(demo.dataset("orders").and_then(|d| d.column("customer_email")).and_then(|c| c.references.as_ref()).is_some_and(|r| r.dataset == "customers" && r.key == "email"));
}

#[test]
fn a_key_the_format_does_not_know_is_named_with_its_line_and_column() {
    let text = "[[report]]\nname = \"a\"\ncolour = \"red\"\n";
    let errors = errors_of(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("bad.toml:3:1: ") && errors[0].contains("colour"), "{errors:?}");
    let errors = errors_of("[[report]\nname = \"a\"\n");
    assert!(errors.len() == 1 && errors[0].starts_with("bad.toml:1:"), "a TOML syntax error is one error with its place: {errors:?}");
}

#[test]
fn every_kind_of_error_after_the_syntax_is_named_with_its_line_and_column_in_one_run() {
    let text = r#"[[report]]
name = "Invoices"
from = "invoices i"
key = "i.id"
time = { sql = "i.issued_at", unit = "days" }
roles = ["admin", "viewer"]
columns = [
  { name = "id", sql = "i.id", type = "integr" },
  { name = "rate", sql = "i.rate", type = "decimal" },
  { name = "paid", sql = "i.paid", type = "boolean", scale = 2 },
  { name = "id", sql = "i.id", type = "integer" },
]
filters = [
  { name = "state", sql = "i.state", type = "one_of" },
  { name = "near", sql = "i.x", type = "within" },
]

[[report]]
name = "dup"
from = "t"
tenant = "t.org"
key = "t.id"
time = { sql = "t.at" }
columns = [{ name = "x", sql = "t.x", type = "text" }]

[[report]]
name = "dup"
from = "t"
tenant = "t.org"
key = "t.id"
time = { sql = "t.at" }
columns = [{ name = "x", sql = "", type = "text" }]

[[dataset]]
name = "clients"
table = "clients"
tenant = "org"
key = [{ name = "mail", column = "email_key", compare = "lower" }]
columns = [
  { name = "email", column = "email", type = "text", pattern = "([0-9]" },
  { name = "owner", column = "owner_id", type = "text", references = { dataset = "people", key = "email", store = "id" } },
  { name = "boss", column = "boss_id", type = "text", references = { dataset = "clients", key = "name", store = "id" } },
  { name = "kind", column = "kind", type = "text", format = "colour" },
  { name = "count", column = "n", type = "integer", values = ["1"] },
]
ignore = ["email"]
"#;
    let errors = errors_of(text);
    let expected = [
        ("bad.toml:2:8:", "report name \"Invoices\""),
        ("bad.toml:1:1:", "has no `tenant`"),
        ("bad.toml:5:38:", "unknown unit \"days\""),
        ("bad.toml:6:19:", "role \"viewer\""),
        ("bad.toml:8:39:", "unknown type \"integr\""),
        ("bad.toml:9:43:", "type \"decimal\" needs a `scale`"),
        ("bad.toml:10:62:", "`scale` applies only to type \"decimal\""),
        ("bad.toml:11:12:", "column \"id\" is declared twice"),
        ("bad.toml:14:45:", "type \"one_of\" needs `values`"),
        ("bad.toml:15:40:", "unknown type \"within\""),
        ("bad.toml:27:8:", "report \"dup\" is declared twice"),
        ("bad.toml:32:32:", "`sql` is empty"),
        ("bad.toml:38:17:", "key \"mail\" is not one of its columns"),
        ("bad.toml:38:57:", "unknown `compare` \"lower\""),
        ("bad.toml:40:64:", "`pattern` is not a regular expression"),
        ("bad.toml:41:82:", "dataset \"people\", which is not declared"),
        ("bad.toml:42:97:", "\"name\" is not a key of dataset \"clients\""),
        ("bad.toml:43:61:", "unknown `format` \"colour\""),
        ("bad.toml:44:62:", "`values` applies only to type \"text\""),
        ("bad.toml:46:11:", "\"email\" is both a column and ignored"),
    ];
    for (place, message) in expected {
        assert!(errors.iter().any(|e| e.starts_with(place) && e.contains(message)), "expected {place} {message} in {errors:#?}");
    }
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
}

#[test]
fn a_digest_is_of_the_definition_with_its_defaults_and_not_of_its_titles() {
    let base = r#"[[report]]
name = "r"
from = "t"
tenant = "t.org"
key = "t.id"
time = { sql = "t.at" }
columns = [{ name = "x", sql = "t.x", type = "text" }]
"#;
    let digest = |text: &str| parse("r.toml", text).expect("reads").reports[0].digest();
    let titled = base.replace("from = \"t\"", "from = \"t\"\ntitle = { en = \"R\", ar = \"ر\" }");
    let defaults_spelled = base.replace("time = { sql = \"t.at\" }", "time = { sql = \"t.at\", unit = \"instant\" }\nroles = [\"analyst\", \"admin\"]");
    assert_eq!(digest(base), digest(&titled));
    assert_eq!(digest(base), digest(&defaults_spelled));
    assert_ne!(digest(base), digest(&base.replace("t.x", "t.y")));
    assert_eq!(digest(base).len(), 64);
}

#[test]
fn a_patterns_classes_are_ascii_whatever_the_cells_script() {
    let digits = format::pattern_regex(r"\d{3}").expect("compiles");
    assert!(digits.is_match("123"));
    assert!(!digits.is_match("١٢٣"), "Arabic-Indic digits are not \\d");
    assert!(!digits.is_match("1234"), "the whole cell");
    let words = format::pattern_regex(r"[\w-]+").expect("compiles");
    assert!(words.is_match("a_b-1") && !words.is_match("سلام"));
    assert!(format::pattern_regex(r"\\d").expect("compiles").is_match("\\d"), "an escaped backslash stays one");
}

#[test]
fn a_title_falls_back_to_english_then_to_the_name() {
    let both = Title { en: Some("Orders".into()), ar: Some("الطلبات".into()) };
    assert_eq!(both.in_language("ar", "orders"), "الطلبات");
    assert_eq!(both.in_language("en", "orders"), "Orders");
    let english = Title { en: Some("Orders".into()), ar: None };
    assert_eq!(english.in_language("ar", "orders"), "Orders");
    assert_eq!(Title::default().in_language("ar", "orders"), "orders");
}

#[test]
fn the_worked_example_of_the_docs_reads_without_an_error() {
    let doc = include_str!("../../../docs/catalog.md");
    let after = doc.split("The catalog is `helpdesk.toml`:").nth(1).expect("the docs name the example");
    let example = after.split("```toml\n").nth(1).and_then(|block| block.split("\n```").next()).expect("a TOML block");
    let catalog = parse("helpdesk.toml", example).map_err(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>()).expect("the example reads");
    let tickets = catalog.dataset("tickets").expect("tickets");
    assert_eq!(tickets.key.len(), 2, "a key of two parts");
    assert!(catalog.report("tickets").is_some_and(|r| r.columns.iter().any(|c| c.title.in_language("ar", &c.name) == "الموضوع")));
}

#[test]
fn keys_references_and_filter_values_are_checked_against_what_they_name() {
    let text = r#"[[dataset]]
name = "tickets"
table = "tickets"
tenant = "org"
key = [{ name = "ref", column = "ref" }, { name = "ref", column = "ref" }, { name = "n", column = "n", compare = "email" }]
columns = [
  { name = "ref", column = "ref", type = "text" },
  { name = "n", column = "n", type = "integer", max_chars = 3 },
  { name = "parent", column = "parent_id", type = "text", references = { dataset = "tickets", key = "ref", store = "id" } },
]

[[report]]
name = "t"
from = "t"
tenant = "t.org"
key = "t.id"
time = { sql = "t.at" }
columns = [{ name = "x", sql = "t.x", type = "text" }]
filters = [{ name = "x", sql = "t.x", type = "at_least", of = "text" }]
"#;
    let errors = errors_of(text);
    let expected = [
        ("bad.toml:5:51:", "key part \"ref\" is declared twice"),
        ("bad.toml:5:114:", "key \"n\" is compared as an email but is not of type \"text\""),
        ("bad.toml:8:61:", "`max_chars` applies only to type \"text\""),
        ("bad.toml:9:101:", "has a key of 3 parts"),
        ("bad.toml:19:", "`of` \"text\" is not a type it can compare"),
    ];
    for (place, message) in expected {
        assert!(errors.iter().any(|e| e.starts_with(place) && e.contains(message)), "expected {place} {message} in {errors:#?}");
    }
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    assert_eq!(errors_of("# nothing\n"), vec!["bad.toml:1:1: the catalog declares no report and no dataset".to_owned()]);
}

#[test]
fn a_datasets_money_currency_names_one_of_its_columns_and_its_sql_only_its_own_placeholders() {
    let text = r#"[[dataset]]
name = "fees"
table = "fees"
tenant = "org"
key = [{ name = "ref", column = "ref" }]
columns = [
  { name = "ref", column = "ref", type = "text" },
  { name = "fee", column = "fee_minor", type = "money", currency = "cur" },
]
after_batch = "UPDATE t SET n = 1 WHERE org = :tenant AND who = :subject"

[authority]
sql = "SELECT role FROM m WHERE org = :tenant AND s = :subject AND k = :nope"
"#;
    let errors = errors_of(text);
    let expected = [
        ("bad.toml:8:68:", "`currency` names the column of the file that gives the row's currency, and \"cur\" is not one"),
        ("bad.toml:10:15:", ":subject has no value here"),
        ("bad.toml:13:7:", "unknown placeholder :nope"),
    ];
    for (place, message) in expected {
        assert!(errors.iter().any(|e| e.starts_with(place) && e.contains(message)), "expected {place} {message} in {errors:#?}");
    }
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
}

#[test]
fn a_key_part_that_is_a_timestamp_or_a_boolean_is_refused() {
    let text = r#"[[dataset]]
name = "visits"
table = "visits"
tenant = "org"
key = [{ name = "at", column = "at" }, { name = "paid", column = "paid" }]
columns = [
  { name = "at", column = "at", type = "timestamp" },
  { name = "paid", column = "paid", type = "boolean" },
]
"#;
    let errors = errors_of(text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("bad.toml:5:17:") && errors[0].contains("key \"at\" is a timestamp or a boolean"), "{errors:#?}");
    assert!(errors[1].starts_with("bad.toml:5:49:") && errors[1].contains("key \"paid\""), "{errors:#?}");
}
