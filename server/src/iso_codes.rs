//! The ISO code lists the catalog's types need: ISO 3166-1 alpha-2 countries (the `countries`
//! filter, an import's `format = "country"`) and ISO 4217 minor units (a `money` column's
//! places).

/// ISO 3166-1 alpha-2 codes, officially assigned.
const ISO_COUNTRIES: &str = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW";

/// Whether `code` is an assigned ISO 3166-1 alpha-2 code.
pub fn is_country(code: &str) -> bool {
    // A set built once: splitting the list for every cell was most of an import's validation.
    static CODES: std::sync::LazyLock<std::collections::HashSet<&'static str>> = std::sync::LazyLock::new(|| ISO_COUNTRIES.split(' ').collect());
    code.len() == 2 && CODES.contains(code)
}

/// ISO 4217 currencies whose minor unit is not a hundredth, with their places.
const PLACES: &[(&str, u32)] = &[
    ("BHD", 3), ("BIF", 0), ("CLF", 4), ("CLP", 0), ("DJF", 0), ("GNF", 0), ("IQD", 3), ("ISK", 0),
    ("JOD", 3), ("JPY", 0), ("KMF", 0), ("KRW", 0), ("KWD", 3), ("LYD", 3), ("OMR", 3), ("PYG", 0),
    ("RWF", 0), ("TND", 3), ("UGX", 0), ("UYI", 0), ("UYW", 4), ("VND", 0), ("VUV", 0), ("XAF", 0),
    ("XOF", 0), ("XPF", 0),
];

/// The places of `currency`'s minor unit (SAR 2, KWD 3, JPY 0): two when it is unknown or absent.
pub fn currency_places(currency: Option<&str>) -> u32 {
    currency.and_then(|code| PLACES.iter().find(|(c, _)| *c == code.trim())).map_or(2, |(_, places)| *places)
}

/// The ISO 4217 codes whose minor unit has `places` places (for places other than two).
pub fn currencies_with_places(places: u32) -> Vec<&'static str> {
    PLACES.iter().filter(|(_, p)| *p == places).map(|(c, _)| *c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_currency_has_its_own_places_and_two_when_unknown_or_absent() {
        assert_eq!(currency_places(Some("SAR")), 2);
        assert_eq!(currency_places(Some("KWD")), 3);
        assert_eq!(currency_places(Some("JPY")), 0);
        assert_eq!(currency_places(Some("XXX")), 2);
        assert_eq!(currency_places(None), 2);
        assert!(PLACES.windows(2).all(|w| w[0].0 < w[1].0), "kept sorted, so a duplicate shows");
    }

    #[test]
    fn only_assigned_country_codes_are_countries() {
        assert!(is_country("SA"));
        assert!(!is_country("sa"));
        assert!(!is_country("XX"));
        assert!(!is_country("SAU"));
    }
}
