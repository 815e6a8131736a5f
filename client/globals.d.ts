// What the page's scripts see besides the DOM: Node's `module`, which markdown.js
// exports itself to when it runs under `node --test`.
declare var module: { exports: unknown } | undefined;
