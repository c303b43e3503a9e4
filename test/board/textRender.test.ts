/**
 * Text summaries rendered to HTML (textRender.ts): Markdown through markdown-it with raw HTML
 * off, links and images checked. Whatever a summary holds, the HTML has no script, no event
 * handler and no link or image that runs or loads something elsewhere.
 */
import { describe, expect, it } from "vitest";

import { renderMarkdown, renderText } from "../../src/board/textRender.js";

/** Every tag and attribute name of an HTML string (a crude scan: the renderer's output is regular). */
const tagsOf = (html: string): string[] => [...html.matchAll(/<([a-z0-9]+)\b/gi)].map((m) => (m[1] as string).toLowerCase());
const attributesOf = (html: string): string[] => [...html.matchAll(/<[a-z0-9]+((?:\s+[a-z-]+(?:="[^"]*")?)*)\s*\/?>/gi)].flatMap((m) => [...(m[1] as string).replace(/="[^"]*"/g, "").matchAll(/\s([a-z-]+)/gi)].map((a) => (a[1] as string).toLowerCase()));

describe("renderMarkdown: Markdown, never raw HTML", () => {
  it("renders Markdown: headings, emphasis, code, lists, tables, links", () => {
    expect(renderMarkdown("# T\n\n**b** *i* `c`\n\n- x\n- y")).toBe("<h1>T</h1>\n<p><strong>b</strong> <em>i</em> <code>c</code></p>\n<ul>\n<li>x</li>\n<li>y</li>\n</ul>\n");
    expect(renderMarkdown("| a | b |\n|---|---|\n| 1 | 2 |")).toContain("<table>");
    expect(renderMarkdown("[docs](https://example.com/a?b=1)")).toBe('<p><a href="https://example.com/a?b=1" rel="noopener noreferrer nofollow" target="_blank">docs</a></p>\n');
    expect(renderMarkdown("[here](#section) [mail](mailto:a@b.c) [rel](other/page)")).toMatch(/href="#section".*href="mailto:a@b.c".*href="other\/page"/);
  });

  const hostile: [string, string][] = [
    ["script element", "<script>alert(1)</script>"],
    ["script, mixed case", "<ScRiPt src=//evil.example/x.js></sCrIpT>"],
    ["img onerror", '<img src=x onerror="alert(1)">'],
    ["svg onload", "<svg onload=alert(1)>"],
    ["iframe", '<iframe src="javascript:alert(1)"></iframe>'],
    ["inline HTML in a paragraph", "text <b onmouseover=alert(1)>bold</b> more"],
    ["HTML block", "<div>\n<a href=\"javascript:alert(1)\">x</a>\n</div>"],
    ["javascript: link", "[x](javascript:alert(1))"],
    ["JavaScript: link, mixed case", "[x](JaVaScRiPt:alert(1))"],
    ["javascript: with an entity", "[x](&#106;avascript:alert(1))"],
    ["javascript: with a tab", "[x](<java\tscript:alert(1)>)"],
    ["javascript: percent-encoded", "[x](java%73cript:alert(1))"],
    ["javascript: autolink", "<javascript:alert(1)>"],
    ["vbscript: link", "[x](vbscript:msgbox(1))"],
    ["data: link", "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)"],
    ["file: link", "[x](file:///etc/passwd)"],
    ["javascript: reference link", "[x][r]\n\n[r]: javascript:alert(1)"],
    ["javascript: image", "![x](javascript:alert(1))"],
    ["image from elsewhere (a tracking pixel)", "![x](https://evil.example/pixel.png)"],
    ["image from elsewhere, protocol-relative", "![x](//evil.example/pixel.png)"],
    ["svg as data: image", "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)"],
    ["attribute break-out in a title", '[x](https://a.b "t\\" onmouseover=\\"alert(1)")'],
  ];

  it.each(hostile)("%s comes out inert", (_, source) => {
    const html = renderMarkdown(source);
    expect(tagsOf(html).filter((t) => !["p", "a", "br", "strong", "em", "code", "pre", "img"].includes(t))).toEqual([]);
    expect(attributesOf(html).filter((a) => a.startsWith("on"))).toEqual([]);
    for (const m of html.matchAll(/\s(?:href|src)="([^"]*)"/g)) {
      expect(m[1]).toMatch(/^(?:https:\/\/a\.b|\/)/);
    }
    expect(html).not.toMatch(/<(?:script|iframe|svg|div|b)\b/i);
  });

  it("an image of the board itself, or an inline raster image, is kept; others become their alt text", () => {
    expect(renderMarkdown("![plot](/data/plugin/images/individualImage?run=a)")).toBe('<p><img src="/data/plugin/images/individualImage?run=a" alt="plot"></p>\n');
    expect(renderMarkdown("![dot](data:image/png;base64,iVBORw0KGgo=)")).toContain('<img src="data:image/png;base64,iVBORw0KGgo="');
    expect(renderMarkdown("![a <b>](https://evil.example/p.png)")).toBe("<p>a &lt;b&gt;</p>\n");
  });
});

describe("renderText: a text tensor as TensorBoard shows it", () => {
  it("rank 0: one Markdown document", () => {
    expect(renderText({ text: ["*hi*"], shape: [] })).toBe("<p><em>hi</em></p>\n");
  });

  it("rank 1: a one-column table; rank 2: a table; each cell Markdown, escaped", () => {
    expect(renderText({ text: ["a", "<script>x</script>"], shape: [2] })).toBe(
      '<table class="text-table"><tbody><tr><td><p>a</p>\n</td></tr><tr><td><p>&lt;script&gt;x&lt;/script&gt;</p>\n</td></tr></tbody></table>',
    );
    const t = renderText({ text: ["a", "b", "c", "d", "e", "f"], shape: [2, 3] });
    expect(t.match(/<tr>/g)).toHaveLength(2);
    expect(t.match(/<td>/g)).toHaveLength(6);
    expect(t.indexOf("<p>c</p>")).toBeLessThan(t.indexOf("<p>d</p>"));
  });

  it("rank 3: the first 2-D slice, with a note", () => {
    // shape [2, 2, 2]: the slice [:, :, 0] is a, c, e, g.
    const t = renderText({ text: ["a", "b", "c", "d", "e", "f", "g", "h"], shape: [2, 2, 2] });
    expect(t).toMatch(/^<p><em>A tensor of shape \[2, 2, 2\]: its first 2-D slice is shown\.<\/em><\/p><table/);
    expect([...t.matchAll(/<p>([a-h])<\/p>/g)].map((m) => m[1])).toEqual(["a", "c", "e", "g"]);
  });
});
