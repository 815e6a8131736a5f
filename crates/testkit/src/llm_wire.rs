//! The scripted model's answers in each provider's wire format, byte-faithfully:
//! Anthropic SSE (`message_start` … `message_stop`, `input_json_delta` fragments),
//! OpenAI Chat Completions SSE (tool-call deltas, usage chunk, `[DONE]`), OpenAI
//! Responses SSE, and Ollama NDJSON.

use serde_json::{json, Value};

use super::llm::Wire;
use super::llm_cache::CacheUse;

pub(crate) fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// Splits text into small pieces, as a real stream does.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

pub(crate) fn encode(
    wire: Wire,
    text: &str,
    calls: &[(String, Value)],
    seq: usize,
    tokens: CacheUse,
) -> Vec<String> {
    match wire {
        Wire::Anthropic => anthropic_events(text, calls, seq, tokens),
        Wire::OpenAi => openai_chunks(text, calls, seq, tokens),
        Wire::Ollama => ollama_lines(text, calls, tokens.fresh),
        Wire::Responses => responses_events(text, calls, seq, tokens.fresh),
    }
}

fn anthropic_events(
    text: &str,
    calls: &[(String, Value)],
    seq: usize,
    tokens: CacheUse,
) -> Vec<String> {
    let mut out = vec![sse(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_{seq}"), "type": "message", "role": "assistant",
            "model": "claude-scripted", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": tokens.fresh, "cache_creation_input_tokens": tokens.write,
                "cache_read_input_tokens": tokens.read, "output_tokens": 1}}}),
    )];
    out.push(sse("ping", json!({"type": "ping"})));
    let mut index = 0;
    if !text.is_empty() {
        out.push(sse("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for p in pieces(text, 7) {
            out.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (n, (name, args)) in calls.iter().enumerate() {
        out.push(sse("content_block_start", json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": format!("toolu_{seq}_{n}"), "name": name, "input": {}}})));
        let mut frags = vec![String::new()];
        frags.extend(pieces(&args.to_string(), 9));
        for f in frags {
            out.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": f}})));
        }
        out.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    out.push(sse("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 20}})));
    out.push(sse("message_stop", json!({"type": "message_stop"})));
    out
}

fn openai_chunks(
    text: &str,
    calls: &[(String, Value)],
    seq: usize,
    tokens: CacheUse,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": format!("chatcmpl-{seq}"), "object": "chat.completion.chunk", "created": 1, "model": "gpt-scripted",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in pieces(text, 7) {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    for (n, (name, args)) in calls.iter().enumerate() {
        out.push(chunk(json!({"tool_calls": [{"index": n, "id": format!("call_{seq}_{n}"), "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null));
        for p in pieces(&args.to_string(), 9) {
            out.push(chunk(
                json!({"tool_calls": [{"index": n, "function": {"arguments": p}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk(json!({}), json!(finish)));
    out.push(format!(
        "data: {}\n\n",
        json!({"id": format!("chatcmpl-{seq}"), "object": "chat.completion.chunk", "created": 1, "model": "gpt-scripted",
            "choices": [], "usage": {"prompt_tokens": tokens.fresh + tokens.read, "completion_tokens": 20,
                "total_tokens": tokens.fresh + tokens.read + 20, "prompt_tokens_details": {"cached_tokens": tokens.read}}})
    ));
    out.push("data: [DONE]\n\n".into());
    out
}

fn responses_events(
    text: &str,
    calls: &[(String, Value)],
    seq: usize,
    tokens: usize,
) -> Vec<String> {
    let id = format!("resp_{seq}");
    let mut out = vec![sse(
        "response.created",
        json!({"type": "response.created", "response": {"id": id, "object": "response", "status": "in_progress", "output": []}}),
    )];
    let mut items = Vec::new();
    let mut index = 0;
    if !text.is_empty() {
        let mid = format!("msg_{seq}");
        out.push(sse("response.output_item.added", json!({"type": "response.output_item.added", "output_index": index,
            "item": {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}})));
        out.push(sse(
            "response.content_part.added",
            json!({"type": "response.content_part.added", "item_id": mid, "output_index": index,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ));
        for p in pieces(text, 7) {
            out.push(sse("response.output_text.delta", json!({"type": "response.output_text.delta", "item_id": mid, "output_index": index, "content_index": 0, "delta": p})));
        }
        out.push(sse("response.output_text.done", json!({"type": "response.output_text.done", "item_id": mid, "output_index": index, "content_index": 0, "text": text})));
        let item = json!({"type": "message", "id": mid, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        out.push(sse(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        items.push(item);
        index += 1;
    }
    for (n, (name, args)) in calls.iter().enumerate() {
        let (fid, cid, a) = (
            format!("fc_{seq}_{n}"),
            format!("call_{seq}_{n}"),
            args.to_string(),
        );
        out.push(sse("response.output_item.added", json!({"type": "response.output_item.added", "output_index": index,
            "item": {"type": "function_call", "id": fid, "call_id": cid, "name": name, "arguments": "", "status": "in_progress"}})));
        for p in pieces(&a, 9) {
            out.push(sse("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "item_id": fid, "output_index": index, "delta": p})));
        }
        out.push(sse("response.function_call_arguments.done", json!({"type": "response.function_call_arguments.done", "item_id": fid, "output_index": index, "arguments": a})));
        let item = json!({"type": "function_call", "id": fid, "call_id": cid, "name": name, "arguments": a, "status": "completed"});
        out.push(sse(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        items.push(item);
        index += 1;
    }
    out.push(sse("response.completed", json!({"type": "response.completed", "response": {"id": id, "object": "response", "status": "completed", "output": items,
        "usage": {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": tokens + 20}}})));
    out
}

fn ollama_lines(text: &str, calls: &[(String, Value)], tokens: usize) -> Vec<String> {
    let line = |v: Value| format!("{v}\n");
    let mut out = Vec::new();
    for p in pieces(text, 7) {
        out.push(line(
            json!({"model": "qwen-scripted", "created_at": "2026-11-30T00:00:00Z",
            "message": {"role": "assistant", "content": p}, "done": false}),
        ));
    }
    if !calls.is_empty() {
        let tc: Vec<Value> = calls
            .iter()
            .map(|(n, a)| json!({"function": {"name": n, "arguments": a}}))
            .collect();
        out.push(line(
            json!({"model": "qwen-scripted", "created_at": "2026-11-30T00:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": tc}, "done": false}),
        ));
    }
    out.push(line(
        json!({"model": "qwen-scripted", "created_at": "2026-11-30T00:00:00Z",
        "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
        "prompt_eval_count": tokens, "eval_count": 20}),
    ));
    out
}
