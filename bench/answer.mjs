// The page benchmarks' long answer.

/** About 35 KB of Markdown: paragraphs with code spans, lists, a table, code blocks. */
export function answer() {
  const parts = [];
  for (let i = 0; parts.join("").length < 35 * 1024; i++) {
    parts.push(`## Part ${i}\n\nThe function \`parse_item_${i}\` reads **bold** and _emphasis_ with a [link](https://example.com/a_(${i})).\n\n`);
    parts.push(`- first point about snake_case_name_${i}\n- second point\n  - nested detail\n\n`);
    parts.push(`| key | value |\n|---|---|\n| a${i} | ${i * 7} |\n\n`);
    parts.push("```rust\nfn main() {\n    println!(\"" + i + "\");\n}\n```\n\n");
  }
  return parts.join("") + "THE-END";
}

