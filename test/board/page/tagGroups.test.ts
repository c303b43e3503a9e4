import { describe, expect, it } from "vitest";

import { pageModule } from "./pageModule.js";

interface Group {
  name: string;
  tags: string[];
  open: boolean;
  page: number;
  pages: number;
  shown: string[];
}
interface Choices {
  open: Map<string, boolean>;
  page: Map<string, number>;
}
const { groupOf, groupTags, layoutGroups, PAGE_SIZE, OPEN_ALL_MAX_TAGS } = await pageModule<{
  groupOf: (tag: string) => string;
  groupTags: (tags: string[]) => { name: string; tags: string[] }[];
  layoutGroups: (tags: string[], choices: Choices) => Group[];
  PAGE_SIZE: number;
  OPEN_ALL_MAX_TAGS: number;
}>("tagGroups.js");

const noChoice = (): Choices => ({ open: new Map(), page: new Map() });
const tagsOf = (groups: number, perGroup: number): string[] =>
  Array.from({ length: groups * perGroup }, (_, i) => `g${String(Math.floor(i / perGroup)).padStart(3, "0")}/t${String(i % perGroup).padStart(3, "0")}`);

describe("tag groups (src/board/page/tagGroups.js)", () => {
  it("a tag's group is the part before its first '/'; tags without one share the group '', listed first", () => {
    expect(groupOf("layer1/weights/mean")).toBe("layer1");
    expect(groupOf("loss")).toBe("");
    expect(groupTags(["accuracy", "eval/loss", "layer1/b", "layer1/w", "loss"])).toEqual([
      { name: "", tags: ["accuracy", "loss"] },
      { name: "eval", tags: ["eval/loss"] },
      { name: "layer1", tags: ["layer1/b", "layer1/w"] },
    ]);
  });

  it("up to 100 tags every group is open; beyond, only the first, unless the user chose", () => {
    const few = layoutGroups(tagsOf(10, 10), noChoice());
    expect(few.every((g) => g.open && g.shown.length === 10)).toBe(true);
    expect(OPEN_ALL_MAX_TAGS).toBe(100);
    const many = layoutGroups(tagsOf(10, 11), noChoice());
    expect(many.map((g) => g.open)).toEqual([true, ...new Array(9).fill(false)]);
    expect(many.slice(1).every((g) => g.shown.length === 0)).toBe(true);
    const chosen = noChoice();
    chosen.open.set("g000", false).set("g004", true);
    expect(layoutGroups(tagsOf(10, 11), chosen).flatMap((g) => (g.open ? [g.name] : []))).toEqual(["g004"]);
  });

  it("a group shows 50 charts a page; a page past the end is the last", () => {
    expect(PAGE_SIZE).toBe(50);
    const choices = noChoice();
    const at = (page: number): Group => {
      choices.page.set("g000", page);
      return layoutGroups(tagsOf(1, 120), choices)[0] as Group;
    };
    expect([at(0), at(1), at(2)].map((g) => [g.page, g.pages, g.shown.length, g.shown[0]])).toEqual([
      [0, 3, 50, "g000/t000"],
      [1, 3, 50, "g000/t050"],
      [2, 3, 20, "g000/t100"],
    ]);
    expect(at(7).page).toBe(2);
    expect(at(-1).page).toBe(0);
  });

  it("20,000 tags: 200 groups listed, one page of one group shown", () => {
    const layout = layoutGroups(tagsOf(200, 100), noChoice());
    expect(layout).toHaveLength(200);
    expect(layout.reduce((n, g) => n + g.shown.length, 0)).toBe(PAGE_SIZE);
  });
});
