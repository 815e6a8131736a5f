//! What a model call cost, in US dollars, from the list prices of the Anthropic and
//! OpenAI models picogent names (per million tokens); unknown models cost 0, as in pi.

use crate::message::{Cost, Usage};

/// Input, output, cache read and cache write prices per million tokens, by model
/// name prefix; the first (longest) prefix that matches wins.
const PRICES: &[(&str, [f64; 4])] = &[
    ("claude-opus-4-6", [5.0, 25.0, 0.5, 6.25]),
    ("claude-opus-4-5", [5.0, 25.0, 0.5, 6.25]),
    ("claude-opus-4", [15.0, 75.0, 1.5, 18.75]),
    ("claude-sonnet-4", [3.0, 15.0, 0.3, 3.75]),
    ("claude-3-7-sonnet", [3.0, 15.0, 0.3, 3.75]),
    ("claude-3-5-sonnet", [3.0, 15.0, 0.3, 3.75]),
    ("claude-haiku-4-5", [1.0, 5.0, 0.1, 1.25]),
    ("claude-3-5-haiku", [0.8, 4.0, 0.08, 1.0]),
    ("gpt-5-nano", [0.05, 0.4, 0.005, 0.0]),
    ("gpt-5-mini", [0.25, 2.0, 0.025, 0.0]),
    ("gpt-5", [1.25, 10.0, 0.125, 0.0]),
    ("gpt-4.1-nano", [0.1, 0.4, 0.025, 0.0]),
    ("gpt-4.1-mini", [0.4, 1.6, 0.1, 0.0]),
    ("gpt-4.1", [2.0, 8.0, 0.5, 0.0]),
    ("gpt-4o-mini", [0.15, 0.6, 0.075, 0.0]),
    ("gpt-4o", [2.5, 10.0, 1.25, 0.0]),
    ("o4-mini", [1.1, 4.4, 0.275, 0.0]),
    ("o3-mini", [1.1, 4.4, 0.55, 0.0]),
    ("o3", [2.0, 8.0, 0.5, 0.0]),
];

/// The cost of `usage` at the price of the first of `models` (the model that answered,
/// then the one asked for) the table knows.
pub(crate) fn cost(models: &[&str], usage: &Usage) -> Cost {
    let price = models
        .iter()
        .find_map(|m| PRICES.iter().find(|(prefix, _)| m.starts_with(prefix)));
    let Some((_, [input, output, cache_read, cache_write])) = price else {
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
