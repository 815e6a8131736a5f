//! What a model call cost, in US dollars, from the list prices of the Anthropic and
//! OpenAI models picogent names (per million tokens); unknown models cost 0, as in pi.

use crate::message::{Cost, Usage};

/// Input, output, cache read and cache write prices per million tokens, by model id
/// (the providers' list prices, as pi's model table has them). A dated snapshot
/// (`-20250514`, `-2024-08-06`) or `-latest` costs what its model does unless listed
/// itself; anything else is unknown. Prefixes are not enough: `gpt-5.4` and `o3-pro`
/// cost several times `gpt-5` and `o3`.
const PRICES: &[(&str, [f64; 4])] = &[
    ("claude-opus-4-6", [5.0, 25.0, 0.5, 6.25]),
    ("claude-opus-4-5", [5.0, 25.0, 0.5, 6.25]),
    ("claude-opus-4-1", [15.0, 75.0, 1.5, 18.75]),
    ("claude-opus-4-0", [15.0, 75.0, 1.5, 18.75]),
    ("claude-opus-4", [15.0, 75.0, 1.5, 18.75]),
    ("claude-sonnet-4-6", [3.0, 15.0, 0.3, 3.75]),
    ("claude-sonnet-4-5", [3.0, 15.0, 0.3, 3.75]),
    ("claude-sonnet-4-0", [3.0, 15.0, 0.3, 3.75]),
    ("claude-sonnet-4", [3.0, 15.0, 0.3, 3.75]),
    ("claude-3-7-sonnet", [3.0, 15.0, 0.3, 3.75]),
    ("claude-3-5-sonnet", [3.0, 15.0, 0.3, 3.75]),
    ("claude-haiku-4-5", [1.0, 5.0, 0.1, 1.25]),
    ("claude-3-5-haiku", [0.8, 4.0, 0.08, 1.0]),
    ("claude-3-haiku", [0.25, 1.25, 0.03, 0.3]),
    ("claude-3-opus", [15.0, 75.0, 1.5, 18.75]),
    ("gpt-5.4-pro", [30.0, 180.0, 0.0, 0.0]),
    ("gpt-5.4", [2.5, 15.0, 0.25, 0.0]),
    ("gpt-5.3-codex", [1.75, 14.0, 0.175, 0.0]),
    ("gpt-5.2-pro", [21.0, 168.0, 0.0, 0.0]),
    ("gpt-5.2-codex", [1.75, 14.0, 0.175, 0.0]),
    ("gpt-5.2-chat", [1.75, 14.0, 0.175, 0.0]),
    ("gpt-5.2", [1.75, 14.0, 0.175, 0.0]),
    ("gpt-5.1-codex-mini", [0.25, 2.0, 0.025, 0.0]),
    ("gpt-5.1-codex-max", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5.1-codex", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5.1-chat", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5.1", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5-pro", [15.0, 120.0, 0.0, 0.0]),
    ("gpt-5-codex", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5-chat", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-5-nano", [0.05, 0.4, 0.005, 0.0]),
    ("gpt-5-mini", [0.25, 2.0, 0.025, 0.0]),
    ("gpt-5", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-4.1-nano", [0.1, 0.4, 0.025, 0.0]),
    ("gpt-4.1-mini", [0.4, 1.6, 0.1, 0.0]),
    ("gpt-4.1", [2.0, 8.0, 0.5, 0.0]),
    ("gpt-4o-mini", [0.15, 0.6, 0.075, 0.0]),
    ("gpt-4o-2024-05-13", [5.0, 15.0, 0.0, 0.0]),
    ("gpt-4o", [2.5, 10.0, 1.25, 0.0]),
    ("o4-mini", [1.1, 4.4, 0.275, 0.0]),
    ("o3-pro", [20.0, 80.0, 0.0, 0.0]),
    ("o3-mini", [1.1, 4.4, 0.55, 0.0]),
    ("o3", [2.0, 8.0, 0.5, 0.0]),
    ("o1-pro", [150.0, 600.0, 0.0, 0.0]),
    ("o1", [15.0, 60.0, 7.5, 0.0]),
];

/// The model's prices: its own entry, else its entry without a snapshot date or
/// `-latest`.
fn prices(model: &str) -> Option<&'static [f64; 4]> {
    let find = |id: &str| PRICES.iter().find(|(m, _)| *m == id).map(|(_, p)| p);
    find(model).or_else(|| find(undated(model)))
}

/// `claude-opus-4-1-20250805` → `claude-opus-4-1`; `gpt-4o-2024-08-06` → `gpt-4o`;
/// `claude-3-7-sonnet-latest` → `claude-3-7-sonnet`.
fn undated(model: &str) -> &str {
    if let Some(base) = model.strip_suffix("-latest") {
        return base;
    }
    let is_date = |s: &str| {
        let digits: String = s.chars().filter(|c| *c != '-').collect();
        digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_digit())
    };
    // -YYYYMMDD, then -YYYY-MM-DD.
    for len in [9, 11] {
        if let Some(cut) = model.len().checked_sub(len) {
            if let (Some(base), Some(tail)) = (model.get(..cut), model.get(cut..)) {
                if tail.starts_with('-') && is_date(tail) {
                    return base;
                }
            }
        }
    }
    model
}

/// The cost of `usage` at the price of the first of `models` (the model that answered,
/// then the one asked for) the table knows.
pub(crate) fn cost(models: &[&str], usage: &Usage) -> Cost {
    let price = models.iter().find_map(|m| prices(m));
    let Some([input, output, cache_read, cache_write]) = price else {
        return Cost::default();
    };
    let per = |tokens: u64, price: &f64| tokens as f64 * price / 1_000_000.0;
    let mut c = Cost {
        input: per(usage.input, input),
        output: per(usage.output, output),
        cache_read: per(usage.cache_read, cache_read),
        cache_write: per(usage.cache_write, cache_write),
        total: 0.0,
    };
    c.total = c.input + c.output + c.cache_read + c.cache_write;
    c
}

#[cfg(test)]
mod tests {
    use super::{prices, undated};

    #[test]
    fn snapshots_cost_what_their_model_does_and_prefixes_are_not_models() {
        assert_eq!(undated("claude-opus-4-1-20250805"), "claude-opus-4-1");
        assert_eq!(undated("claude-sonnet-4-20250514"), "claude-sonnet-4");
        assert_eq!(undated("gpt-4o-2024-08-06"), "gpt-4o");
        assert_eq!(undated("claude-3-5-haiku-latest"), "claude-3-5-haiku");
        assert_eq!(undated("gpt-5"), "gpt-5");
        assert_eq!(
            prices("claude-sonnet-4-5-20250929"),
            prices("claude-sonnet-4-5")
        );
        assert_eq!(prices("gpt-4o-2024-05-13").map(|p| p[0]), Some(5.0));
        assert_eq!(prices("gpt-4o-2024-11-20").map(|p| p[0]), Some(2.5));
        assert_eq!(prices("gpt-5.4").map(|p| p[0]), Some(2.5));
        assert_eq!(prices("o3-pro").map(|p| p[0]), Some(20.0));
        assert_eq!(prices("o3-deep-research"), None);
        assert_eq!(prices("gpt-5-turbo-whatever"), None);
        assert_eq!(prices("llama3.2"), None);
    }
}
