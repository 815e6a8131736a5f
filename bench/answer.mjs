// The page benchmarks' long answer.

/** About `kb` KB of Markdown (35 unless said): paragraphs with code spans, lists, a
 * table, code blocks. */
export function answer(kb = 35) {
  const parts = [];
  let size = 0;
  for (let i = 0; size < kb * 1024; i++) {
    parts.push(`## Part ${i}\n\nThe function \`parse_item_${i}\` reads **bold** and _emphasis_ with a [link](https://example.com/a_(${i})).\n\n`);
    parts.push(`- first point about snake_case_name_${i}\n- second point\n  - nested detail\n\n`);
    parts.push(`| key | value |\n|---|---|\n| a${i} | ${i * 7} |\n\n`);
    parts.push("```rust\nfn main() {\n    println!(\"" + i + "\");\n}\n```\n\n");
    size += parts[parts.length - 4].length + parts[parts.length - 3].length + parts[parts.length - 2].length + parts[parts.length - 1].length;
  }
  return parts.join("") + "THE-END";
}


/** One code block of about `kb` KB (a long generated file): the longest single block an
 * answer can hold. */
export function codeAnswer(kb = 35) {
  const lines = ["```python"];
  let size = 0;
  for (let i = 0; size < kb * 1024; i++) {
    const line = `def handler_${i}(event, context):  # step ${i}\n    return {"status": ${i % 500}, "body": "item ${i}"}\n`;
    lines.push(line.slice(0, -1)); size += line.length;
  }
  return lines.join("\n") + "\n```\n\nTHE-END";
}
