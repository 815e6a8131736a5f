//! Prompt caching as the real APIs do it, for the scripted server, so tests and
//! benchmarks can measure what an agent's requests would be billed.
//!
//! Anthropic (explicit breakpoints): a request's content is a sequence of blocks in the
//! API's cache order — tools, then system, then each message's blocks. A block with
//! `cache_control` is a breakpoint (at most four, else HTTP 400). A breakpoint's prefix
//! (everything up to and including its block) is read from the cache when an entry for
//! exactly that prefix is alive; the server also looks back up to `LOOKBACK_BLOCKS`
//! block boundaries before each breakpoint for a shorter cached prefix. After the read,
//! every breakpoint past it whose prefix has at least `MIN_CACHEABLE_TOKENS` is written.
//! Entries live `LIFETIME` and each read renews it. Usage then reports
//! `cache_read_input_tokens` (the prefix read), `cache_creation_input_tokens` (from the
//! end of the read to the last written breakpoint) and `input_tokens` (the rest).
//!
//! OpenAI (automatic): every message boundary whose prefix has at least
//! `MIN_CACHEABLE_TOKENS` is cached; the longest alive one is reported as
//! `prompt_tokens_details.cached_tokens`. `prompt_cache_key` is part of the key.
//!
//! A block's size in tokens is its JSON (without `cache_control`) in bytes / 4, like
//! the whole request's. The clock can be moved forward by tests (`advance`).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Claude Sonnet's and Opus's minimum; a shorter prefix is processed without caching.
pub const MIN_CACHEABLE_TOKENS: usize = 1024;
/// The default (`ephemeral`) lifetime, renewed by each read.
pub const LIFETIME: Duration = Duration::from_secs(300);
/// How many block boundaries before a breakpoint are also checked for a hit.
pub const LOOKBACK_BLOCKS: usize = 20;
pub const MAX_BREAKPOINTS: usize = 4;

/// How a request's input tokens split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub fresh: usize,
    pub write: usize,
    pub read: usize,
}

impl CacheUse {
    /// Input as billed, in fresh-token equivalents ×100 (write ×1.25, read ×0.1).
    pub fn billed_x100(&self) -> usize {
        self.fresh * 100 + self.write * 125 + self.read * 10
    }
}

/// One block of a request in cache order.
struct Block {
    /// Tokens of the prefix through this block.
    end: usize,
    /// Hash of the prefix through this block.
    key: u64,
    breakpoint: bool,
}

#[derive(Default)]
pub struct PromptCache {
    /// Prefix hash → when it expires, on this cache's clock.
    entries: HashMap<u64, Duration>,
    started: Option<Instant>,
    /// Added to the real time by `advance`.
    skew: Duration,
}

impl PromptCache {
    fn now(&mut self) -> Duration {
        self.started.get_or_insert_with(Instant::now).elapsed() + self.skew
    }

    /// Moves this cache's clock forward (tests of the lifetime).
    pub fn advance(&mut self, by: Duration) {
        self.skew += by;
    }

    fn alive(&mut self, key: u64) -> bool {
        let now = self.now();
        self.entries.get(&key).is_some_and(|exp| *exp > now)
    }

    fn keep(&mut self, key: u64) {
        let exp = self.now() + LIFETIME;
        self.entries.insert(key, exp);
    }

    /// An Anthropic Messages request of `total` tokens; an error is the API's 400.
    pub fn anthropic(&mut self, body: &Value, total: usize) -> Result<CacheUse, String> {
        let blocks = anthropic_blocks(body);
        let marks: Vec<usize> = (0..blocks.len())
            .filter(|i| blocks[*i].breakpoint)
            .collect();
        if marks.len() > MAX_BREAKPOINTS {
            return Err(format!(
                "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
                marks.len()
            ));
        }
        // The longest cached prefix at a breakpoint or within the look-back before one.
        let mut hit: Option<usize> = None;
        for &m in &marks {
            let from = m.saturating_sub(LOOKBACK_BLOCKS);
            if let Some(i) = (from..=m).rev().find(|i| self.alive(blocks[*i].key)) {
                hit = hit.max(Some(i));
            }
        }
        let read = hit.map_or(0, |i| blocks[i].end);
        if let Some(i) = hit {
            self.keep(blocks[i].key);
        }
        let mut written_to = read;
        for &m in marks.iter().filter(|m| hit.is_none_or(|h| **m > h)) {
            if blocks[m].end >= MIN_CACHEABLE_TOKENS {
                self.keep(blocks[m].key);
                written_to = written_to.max(blocks[m].end);
            }
        }
        let write = written_to - read;
        Ok(CacheUse {
            fresh: total.saturating_sub(read + write),
            write,
            read,
        })
    }

    /// An OpenAI Chat Completions request of `total` tokens: how many were cached.
    pub fn openai(&mut self, body: &Value, total: usize) -> usize {
        let blocks = openai_blocks(body);
        let read = (0..blocks.len())
            .rev()
            .find(|i| blocks[*i].end >= MIN_CACHEABLE_TOKENS && self.alive(blocks[*i].key))
            .map_or(0, |i| blocks[i].end);
        for b in blocks.iter().filter(|b| b.end >= MIN_CACHEABLE_TOKENS) {
            self.keep(b.key);
        }
        read.min(total)
    }
}

/// Builds the blocks of a prefix one by one: running token count and running hash.
struct Prefix {
    hasher: DefaultHasher,
    tokens: usize,
    blocks: Vec<Block>,
}

impl Prefix {
    /// A prefix whose key starts with `salt` (the model; OpenAI's cache key), uncounted.
    fn new(salt: &[&Value]) -> Self {
        let mut hasher = DefaultHasher::new();
        for v in salt {
            v.to_string().hash(&mut hasher);
        }
        Prefix {
            hasher,
            tokens: 0,
            blocks: Vec::new(),
        }
    }

    /// Adds one block; `context` (a role) is hashed with it, not counted.
    fn push(&mut self, context: &str, block: &Value) {
        let mut plain = block.clone();
        let breakpoint = match plain.as_object_mut() {
            Some(o) => o.remove("cache_control").is_some_and(|c| !c.is_null()),
            None => false,
        };
        let text = plain.to_string();
        context.hash(&mut self.hasher);
        text.hash(&mut self.hasher);
        self.tokens += text.len() / 4;
        self.blocks.push(Block {
            end: self.tokens,
            key: self.hasher.finish(),
            breakpoint,
        });
    }
}

fn each<'a>(v: &'a Value) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
    match v {
        Value::Array(items) => Box::new(items.iter()),
        Value::Null => Box::new(std::iter::empty()),
        other => Box::new(std::iter::once(other)),
    }
}

fn anthropic_blocks(body: &Value) -> Vec<Block> {
    let mut p = Prefix::new(&[&body["model"]]);
    for tool in each(&body["tools"]) {
        p.push("tool", tool);
    }
    for block in each(&body["system"]) {
        p.push("system", block);
    }
    for msg in each(&body["messages"]) {
        let role = msg["role"].as_str().unwrap_or("");
        for block in each(&msg["content"]) {
            p.push(role, block);
        }
    }
    p.blocks
}

fn openai_blocks(body: &Value) -> Vec<Block> {
    let mut p = Prefix::new(&[&body["model"], &body["prompt_cache_key"]]);
    p.push("tools", &body["tools"]);
    for msg in each(&body["messages"]) {
        p.push("message", msg);
    }
    p.blocks
}
