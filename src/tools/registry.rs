//! The tools as types. Each built-in tool says once, in its own file, its name, its
//! arguments (the JSON schema the model sees is derived from the argument type, its
//! description from the type's doc comment), whether it only reads, how a call is shown
//! to people, and who bounds its time. Dispatch, the specs sent to the model and the
//! one-line descriptions of calls all come from here; nothing else matches on names.
//!
//! A `Source` is where tools come from: the built-ins are one, the MCP servers another
//! (`crate::mcp`); the agent loop asks its sources in turn.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{parse_args, ToolContext, ToolError, ToolOutput};
use crate::provider::ToolSpec;

/// A boxed future of a tool call.
pub(crate) type CallFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// Who bounds a call's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The run's `step_timeout`, and cancellation with the run, applied by the registry.
    Step,
    /// The tool itself (bash: its `timeout` argument may exceed the step limit, and it
    /// must kill its process group on either).
    Own,
}

/// One built-in tool.
pub(crate) trait Tool: Send + Sync + 'static {
    /// The arguments as the model sends them; their schema is what the model is shown.
    type Args: DeserializeOwned + JsonSchema;
    /// The name the model calls it by (pi's names).
    const NAME: &'static str;
    /// How people see it: "Read", "Bash".
    const LABEL: &'static str;
    /// Read-only tools may run side by side; the others run alone, in call order.
    const READ_ONLY: bool = false;
    const LIMIT: Limit = Limit::Step;
    /// Whether people may watch its output while it runs (`ToolContext::on_output`).
    const STREAMS: bool = false;

    /// What follows the label when a call is shown, from the raw arguments (shown even
    /// when they do not parse): the path, the command.
    fn detail(args: &Value) -> String;

    fn run(
        args: Self::Args,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

/// A tool as the registry holds it (object safe).
pub(crate) trait Entry: Send + Sync {
    fn name(&self) -> &'static str;
    fn label(&self) -> &'static str;
    fn read_only(&self) -> bool;
    fn limit(&self) -> Limit;
    fn streams(&self) -> bool;
    fn detail(&self, args: &Value) -> String;
    fn spec(&self) -> ToolSpec;
    fn call<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;
}

/// The registry's handle on a tool type.
pub(crate) struct Builtin<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Builtin<T> {
    pub(crate) const fn new() -> Self {
        Builtin(std::marker::PhantomData)
    }
}

impl<T: Tool> Entry for Builtin<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn label(&self) -> &'static str {
        T::LABEL
    }
    fn read_only(&self) -> bool {
        T::READ_ONLY
    }
    fn limit(&self) -> Limit {
        T::LIMIT
    }
    fn streams(&self) -> bool {
        T::STREAMS
    }
    fn detail(&self, args: &Value) -> String {
        T::detail(args)
    }
    fn spec(&self) -> ToolSpec {
        let (description, parameters) = schema_of::<T::Args>();
        ToolSpec {
            name: Cow::Borrowed(T::NAME),
            description: Cow::Owned(description),
            parameters,
        }
    }
    fn call<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>> {
        Box::pin(async move {
            let parsed: T::Args = parse_args(T::NAME, args)?;
            T::run(parsed, ctx).await
        })
    }
}

/// The type's doc comment (the tool's description) and its schema, trimmed to what
/// providers take and pi sends: no meta-schema, title or number formats, and an
/// optional argument is its type, not "type or null" (it is simply not required).
fn schema_of<A: JsonSchema>() -> (String, Value) {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<A>();
    let mut v = schema.to_value();
    let description = match v.as_object_mut() {
        Some(o) => {
            o.remove("$schema");
            o.remove("title");
            let d = o.remove("description");
            d.and_then(|d| d.as_str().map(str::to_string))
                .unwrap_or_default()
        }
        None => String::new(),
    };
    tidy(&mut v);
    (description, v)
}

fn tidy(v: &mut Value) {
    match v {
        Value::Object(o) => {
            // Argument names are keys of `properties`, not keywords: only their
            // schemas are tidied.
            if let Some(Value::Object(props)) = o.get_mut("properties") {
                props.values_mut().for_each(tidy);
            }
            if let Some(items) = o.get_mut("items") {
                tidy(items);
            }
            o.remove("format");
            o.remove("title");
            if let Some(Value::Array(types)) = o.get("type") {
                let real: Vec<Value> = types
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .cloned()
                    .collect();
                if let [one] = real.as_slice() {
                    o.insert("type".into(), one.clone());
                }
            }
            // An optional integer's lower bound is schemars' unsigned type, not ours.
            if o.get("minimum").and_then(Value::as_u64) == Some(0) {
                o.remove("minimum");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// Where a loop's tools come from: the built-ins, an MCP connection.
pub(crate) trait Source: Sync {
    /// The tools as the model sees them now.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Whether `name` is one of this source's tools.
    fn owns(&self, name: &str) -> bool;
    /// Whether the call only reads (may run beside other reads).
    fn read_only(&self, name: &str) -> bool;
    /// Runs a call this source owns. Never fails: errors become error outputs.
    fn call<'a>(&'a self, name: &'a str, args: &'a Value, ctx: &'a ToolContext) -> CallFuture<'a>;
}

/// The seven built-in tools (spec §4).
pub(crate) struct Builtins;

impl Source for Builtins {
    fn specs(&self) -> Vec<ToolSpec> {
        super::specs()
    }
    fn owns(&self, name: &str) -> bool {
        super::builtin(name).is_some()
    }
    fn read_only(&self, name: &str) -> bool {
        super::is_read_only(name)
    }
    fn call<'a>(&'a self, name: &'a str, args: &'a Value, ctx: &'a ToolContext) -> CallFuture<'a> {
        Box::pin(super::execute(name, args, ctx))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// The schemas derived from the argument types are the shapes pi sends (and
    /// picogent sent when they were written by hand), descriptions included.
    #[test]
    fn derived_schemas_are_pis_shapes() {
        let want = [
            ("read", "Read a text file. Output is capped at 2000 lines or 50 KB; use offset and limit to page through large files.",
             json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the working folder or absolute"},
                "offset": {"type": "integer", "description": "First line to read, 1-based"},
                "limit": {"type": "integer", "description": "Number of lines to read"}
            }, "required": ["path"]})),
            ("write", "Create or overwrite a file with the given content. Parent folders are created.",
             json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path"},
                "content": {"type": "string", "description": "The whole new content"}
            }, "required": ["path", "content"]})),
            ("edit", "Replace text in a file. Each oldText must occur exactly once in the file as it was before the call; edits must not overlap. Answers with a diff.",
             json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path"},
                "edits": {"type": "array", "items": {"type": "object", "description": "One replacement.", "properties": {
                    "oldText": {"type": "string", "description": "Exact text to replace"},
                    "newText": {"type": "string", "description": "Replacement text"}
                }, "required": ["oldText", "newText"]}}
            }, "required": ["path", "edits"]})),
            ("bash", "Run a bash command in the working folder. stdout and stderr are merged; output keeps the last 2000 lines or 50 KB, and the full output is saved to a file when cut.",
             json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command line"},
                "timeout": {"type": "integer", "description": "Seconds before the command is killed (default and maximum: the configured limit, 120 s unless set otherwise)"}
            }, "required": ["command"]})),
            ("grep", "Search file contents with a regular expression. Respects .gitignore. Prints path:line: text.",
             json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Regular expression (or literal text with literal=true)"},
                "path": {"type": "string", "description": "File or folder to search (default: working folder)"},
                "glob": {"type": "string", "description": "Only files matching this glob, e.g. *.rs"},
                "ignoreCase": {"type": "boolean", "default": false},
                "literal": {"type": "boolean", "default": false},
                "context": {"type": "integer", "description": "Lines of context around each match"},
                "limit": {"type": "integer", "description": "Maximum matches (default 100)"}
            }, "required": ["pattern"]})),
            ("find", "Find files whose path matches a glob, e.g. **/*.rs. Respects .gitignore.",
             json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Glob pattern"},
                "path": {"type": "string", "description": "Folder to search (default: working folder)"},
                "limit": {"type": "integer", "description": "Maximum results (default 1000)"}
            }, "required": ["pattern"]})),
            ("ls", "List one folder, sorted; folders end in /. Dotfiles included.",
             json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Folder (default: working folder)"},
                "limit": {"type": "integer", "description": "Maximum entries (default 500)"}
            }})),
        ];
        let specs = super::super::specs();
        assert_eq!(specs.len(), want.len());
        for (spec, (name, description, parameters)) in specs.iter().zip(want) {
            assert_eq!(spec.name, name);
            assert_eq!(spec.description, description, "{name}");
            pretty_assertions::assert_eq!(spec.parameters, parameters, "{name}");
        }
    }

    #[test]
    fn calls_are_shown_by_their_tool() {
        let show = |name, args| super::super::describe_call(name, &args);
        assert_eq!(
            show("grep", json!({"pattern": "fn main", "path": "src"})),
            "Grep: fn main in src"
        );
        assert_eq!(show("ls", json!({})), "Ls: .");
        assert_eq!(
            show("bash", json!({"command": "cargo test"})),
            "Bash: cargo test"
        );
        assert_eq!(
            show("mcp__fs__read", json!({"a": 1})),
            "mcp__fs__read: {\"a\":1}"
        );
        assert!(super::super::is_read_only("grep") && !super::super::is_read_only("edit"));
        assert!(!super::super::is_read_only("mcp__fs__read"));
    }
}
