/**
 * The index file's table (LevelDB's format, as TensorFlow writes it): golden bytes derived by
 * hand from the format's description, the layout rules (restart points, separators, block
 * size), and hostile tables, each refused with a one-line DataLossError at the right offset.
 */
import { describe, expect, it } from "vitest";

import { InvalidArgumentError, UnimplementedError } from "../../../src/errors.js";
import { buildTable, readTable } from "../../../src/checkpoint/tensorBundle/sstable.js";
import {
  assembleTable,
  blockContents,
  bytes,
  concat,
  EMPTY_BLOCK,
  entry,
  fixed32,
  footer,
  handle,
  hex,
  varint,
  withTrailer,
} from "./tableBytes.js";
import { dataLossOf, type DataLossAt } from "./dataLoss.js";

const FILE = "/ckpt/x.index";
const rows = (pairs: readonly (readonly [string | Uint8Array, string | Uint8Array])[]): [Uint8Array, Uint8Array][] =>
  pairs.map(([k, v]) => [bytes(k), bytes(v)]);
const text = (b: Uint8Array): string => Buffer.from(b).toString("latin1");

/** The DataLossError that `f` throws: one line, naming the file and the byte offset. */
const dataLoss = (f: () => unknown): DataLossAt => dataLossOf(FILE, f);

describe("the index table's golden bytes (derived from the format's description)", () => {
  it("two data blocks: entries, restart arrays, trailers, the shortest separator, the short successor, the footer", () => {
    // A block is closed once its size estimate reaches 1 byte: one key per block.
    const built = buildTable(rows([["apple", "x"], ["cherry", "y"]]), { blockSizeBytes: 1 });
    const expected = concat(
      // @0 data block 1 (17 bytes): shared 0, unshared 5, value 1, "apple", "x"; restarts [0]; count 1
      withTrailer(hex("00 05 01 6170706c65 78  00000000  01000000")),
      // @22 data block 2 (18 bytes)
      withTrailer(hex("00 06 01 636865727279 79  00000000  01000000")),
      // @45 metaindex (8 bytes): no entries, restarts [0]
      withTrailer(hex("00000000 01000000")),
      // @58 index (24 bytes): "b" (apple < b < cherry) → (0, 17); "d" (after cherry) → (22, 18);
      // a restart at every entry: [0, 6]; count 2
      withTrailer(hex("00 01 02 62 00 11   00 01 02 64 16 12   00000000 06000000  02000000")),
      // @87 footer: metaindex (45, 8), index (58, 24), zero padding to 40 bytes, magic
      hex(`2d 08 3a 18 ${"00".repeat(36)} 57fb808b 247547db`),
    );
    expect(Buffer.from(built).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
    expect(built.length).toBe(87 + 48);
    expect(readTable(built, FILE).map((e) => [text(e.key), text(e.value), e.valueOffset])).toEqual([
      ["apple", "x", 8],
      ["cherry", "y", 22 + 9],
    ]);
  });

  it("a data block shares key prefixes and restarts every 16 keys", () => {
    const keys = Array.from({ length: 18 }, (_, i) => `key${String(i).padStart(2, "0")}`);
    const built = buildTable(rows(keys.map((k) => [k, "v"])));
    const entries: Uint8Array[] = [];
    for (let i = 0; i < keys.length; i++) {
      if (i === 0 || i === 16) entries.push(entry(0, keys[i] as string, "v"));
      else if (i === 10) entries.push(entry(3, "10", "v")); // "key09" → "key10" shares "key"
      else entries.push(entry(4, (keys[i] as string).slice(4), "v"));
    }
    const restart16 = entries.slice(0, 16).reduce((n, e) => n + e.length, 0);
    // The last block's separator is the short successor of "key17": "l".
    const expected = assembleTable([{ contents: blockContents(entries, [0, restart16]), separator: "l" }]);
    expect(Buffer.from(built).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
    expect(readTable(built, FILE).map((e) => text(e.key))).toEqual(keys);
  });

  it("separators: shortened only when the incremented byte stays below the next key's; successors skip 0xff", () => {
    const keys = ["ab", "abc", "abzz", "b", "d"];
    const built = buildTable(rows(keys.map((k) => [k, ""])), { blockSizeBytes: 1 });
    // ab|abc: a prefix, kept; abc|abzz: "abd"; abzz|b: 'a'+1 is not below 'b', kept; b|d: "c"; last: "e".
    const separators = ["ab", "abd", "abzz", "c", "e"];
    const expected = assembleTable(keys.map((k, i) => ({ contents: blockContents([entry(0, k, "")]), separator: separators[i] as string })));
    expect(Buffer.from(built).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
    expect(readTable(built, FILE).map((e) => text(e.key))).toEqual(keys);

    const allFf = buildTable(rows([[hex("ffff"), "v"]]));
    expect(Buffer.from(allFf).toString("hex")).toBe(
      Buffer.from(assembleTable([{ contents: blockContents([entry(0, hex("ffff"), "v")]), separator: hex("ffff") }])).toString("hex"),
    );
    const ffThenZ = buildTable(rows([[hex("ffff7a"), "v"]]));
    expect(Buffer.from(ffThenZ).toString("hex")).toBe(
      Buffer.from(assembleTable([{ contents: blockContents([entry(0, hex("ffff7a"), "v")]), separator: hex("ffff7b") }])).toString("hex"),
    );
  });

  it("closes a data block once its size estimate (entries + restarts + count) reaches the block size", () => {
    // A restart entry is 3 + 2 + 10 = 15 bytes, the next (sharing "k") 3 + 1 + 10 = 14; with one
    // restart and the count, two entries are estimated at 37 bytes: a 37-byte block size closes
    // every block after its second entry ("k2" and "k3" differ by one: no shorter separator).
    const keys = ["k1", "k2", "k3", "k4", "k5"];
    const built = buildTable(rows(keys.map((k) => [k, "0123456789"])), { blockSizeBytes: 37 });
    const e = (k: string, shared: number): Uint8Array => entry(shared, k.slice(shared), "0123456789");
    const expected = assembleTable([
      { contents: blockContents([e("k1", 0), e("k2", 1)]), separator: "k2" },
      { contents: blockContents([e("k3", 0), e("k4", 1)]), separator: "k4" },
      { contents: blockContents([e("k5", 0)]), separator: "l" },
    ]);
    expect(Buffer.from(built).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
  });

  it("reads a table that has no data block at all", () => {
    expect(readTable(assembleTable([]), FILE)).toEqual([]);
  });

  it("refuses keys that do not strictly increase when building", () => {
    expect(() => buildTable(rows([["b", ""], ["a", ""]]))).toThrow(InvalidArgumentError);
    expect(() => buildTable(rows([["a", ""], ["a", ""]]))).toThrow(InvalidArgumentError);
  });
});

describe("hostile index tables: a one-line DataLossError naming the file and the offset", () => {
  const good = (): Uint8Array => assembleTable([{ contents: blockContents([entry(0, "a", "1"), entry(0, "b", "2")]), separator: "c" }]);
  /** A table whose data block's contents are `contents`, every checksum valid. */
  const withBlock = (contents: Uint8Array, separator: string | Uint8Array = "z"): Uint8Array => assembleTable([{ contents, separator }]);

  it("a file shorter than the footer", () => {
    const t = good().subarray(0, 47);
    expect(dataLoss(() => readTable(t, FILE))).toMatchObject({ offset: 0, message: expect.stringContaining("too short to be an sstable") });
  });

  it("a bad magic number", () => {
    const t = good();
    t[t.length - 1] = (t[t.length - 1] as number) ^ 1;
    expect(dataLoss(() => readTable(t, FILE))).toMatchObject({ offset: t.length - 8, message: expect.stringContaining("bad magic number") });
  });

  it("an index handle past the end of the file, and one whose size overflows", () => {
    const body = withTrailer(EMPTY_BLOCK);
    for (const index of [handle(1000, 8), handle(0, 2 ** 53 - 1), handle(2 ** 52, 2 ** 52)]) {
      const t = concat(body, footer(handle(0, EMPTY_BLOCK.length), index));
      const { offset, message } = dataLoss(() => readTable(t, FILE));
      expect(message).toContain("bad block handle");
      expect(offset).toBe(body.length + 2); // the index handle, after the metaindex's 2 bytes
    }
  });

  it("a handle whose varint is too long or too large", () => {
    const body = withTrailer(EMPTY_BLOCK);
    const tooLong = concat(new Array<number>(11).fill(0x80), [0]);
    const tooLarge = hex("ffffffffffffffff7f"); // 2^63 - 1
    for (const bad of [tooLong, tooLarge]) {
      const t = concat(body, footer(bad, handle(0, 8)));
      expect(dataLoss(() => readTable(t, FILE))).toMatchObject({ offset: body.length, message: expect.stringContaining("bad block handle") });
    }
  });

  it("a block whose checksum does not match, a bad block type, a Snappy block", () => {
    const t = good();
    t[3] = (t[3] as number) ^ 0x40;
    const { offset, message } = dataLoss(() => readTable(t, FILE));
    expect(message).toContain("block checksum mismatch");
    const contentsLength = blockContents([entry(0, "a", "1"), entry(0, "b", "2")]).length;
    expect(offset).toBe(contentsLength + 1);

    const typed = (type: number): Uint8Array => {
      const contents = blockContents([entry(0, "a", "1")]);
      const block = withTrailer(contents, type);
      const index = blockContents([entry(0, "b", handle(0, contents.length))]);
      const meta = withTrailer(EMPTY_BLOCK);
      return concat(block, meta, withTrailer(index), footer(handle(block.length, EMPTY_BLOCK.length), handle(block.length + meta.length, index.length)));
    };
    expect(dataLoss(() => readTable(typed(2), FILE)).message).toContain("bad block type 2");
    expect(() => readTable(typed(1), FILE)).toThrow(UnimplementedError);
    expect(() => readTable(typed(1), FILE)).toThrow(/Snappy/);
  });

  it("a restart array that runs past the block, restart points that lie, a block too short for its count", () => {
    const e = [entry(0, "a", "1"), entry(0, "b", "2")];
    const entriesLength = e.reduce((n, x) => n + x.length, 0);
    const countPast = concat(...e, fixed32(0), fixed32(1000));
    expect(dataLoss(() => readTable(withBlock(countPast), FILE))).toMatchObject({ offset: entriesLength + 4, message: expect.stringContaining("run past the block") });
    const maxCount = concat(...e, fixed32(0), fixed32(0xffffffff));
    expect(dataLoss(() => readTable(withBlock(maxCount), FILE)).message).toContain("run past the block");
    const pastEntries = blockContents(e, [0, entriesLength + 2]);
    expect(dataLoss(() => readTable(withBlock(pastEntries), FILE)).message).toContain("restart point 1");
    const notFirstAtZero = blockContents(e, [3]);
    expect(dataLoss(() => readTable(withBlock(notFirstAtZero), FILE)).message).toContain("restart point 0");
    const midEntry = blockContents(e, [0, 2]);
    expect(dataLoss(() => readTable(withBlock(midEntry), FILE)).message).toContain("not at an entry");
    const noRestart = concat(...e, fixed32(0));
    expect(dataLoss(() => readTable(withBlock(noRestart), FILE)).message).toContain("no restart point");
    expect(dataLoss(() => readTable(withBlock(hex("0100")), FILE)).message).toContain("cannot hold the restart count");
  });

  it("a key out of order, a repeated key, a key after its block's separator, keys across blocks out of order", () => {
    const outOfOrder = blockContents([entry(0, "b", "1"), entry(0, "a", "2")]);
    const { offset, message } = dataLoss(() => readTable(withBlock(outOfOrder), FILE));
    expect(message).toContain("does not sort after");
    expect(offset).toBe(entry(0, "b", "1").length + 3 + 1); // the value of the second entry
    expect(dataLoss(() => readTable(withBlock(blockContents([entry(0, "a", "1"), entry(1, "", "2")])), FILE)).message).toContain("does not sort after");
    expect(dataLoss(() => readTable(withBlock(blockContents([entry(0, "q", "1")]), "m"), FILE)).message).toContain("after its block's separator");
    const twoBlocks = assembleTable([
      { contents: blockContents([entry(0, "m", "1")]), separator: "n" },
      { contents: blockContents([entry(0, "c", "2")]), separator: "z" },
    ]);
    expect(dataLoss(() => readTable(twoBlocks, FILE)).message).toContain("does not sort after");
  });

  it("entries whose lengths lie: shared bytes the previous key lacks, a value past the block, varints too long", () => {
    expect(dataLoss(() => readTable(withBlock(blockContents([entry(0, "a", "1"), entry(5, "b", "2")], [0])), FILE)).message).toContain("shares 5 bytes");
    expect(dataLoss(() => readTable(withBlock(blockContents([entry(3, "a", "1")], [0])), FILE)).message).toContain("restart point shares");
    const valuePast = blockContents([concat(varint(0), varint(1), varint(200), bytes("a1"))]);
    expect(dataLoss(() => readTable(withBlock(valuePast), FILE))).toMatchObject({ offset: 0, message: expect.stringContaining("run past the entries' end") });
    const keyPast = blockContents([concat(varint(0), varint(2 ** 32 - 1), varint(0), bytes("a"))]);
    expect(dataLoss(() => readTable(withBlock(keyPast), FILE)).message).toContain("run past the entries' end");
    const longVarint = blockContents([concat([0x80, 0x80, 0x80, 0x80, 0x80, 0x00], varint(1), varint(1), bytes("a1"))]);
    expect(dataLoss(() => readTable(withBlock(longVarint), FILE)).message).toContain("varint longer than 5 bytes");
    const over32 = blockContents([concat([0xff, 0xff, 0xff, 0xff, 0x7f], varint(1), varint(1), bytes("a1"))]);
    expect(dataLoss(() => readTable(withBlock(over32), FILE)).message).toContain("overflows 32 bits");
    const truncated = blockContents([hex("0001")]);
    expect(dataLoss(() => readTable(withBlock(truncated), FILE)).message).toContain("truncated varint");
  });

  it("keys that share ever longer prefixes: refused once they add up to 16 times the file, not copied without end", () => {
    // A 100,000-byte key, then 60,000 entries of 5 bytes, each its predecessor plus one byte:
    // 6 GB of keys from a 400 KB file (copying them all would not end within the test's timeout).
    const first = entry(0, new Uint8Array(100_000).fill(0x61), "");
    const rest = Array.from({ length: 60_000 }, (_, i) => entry(100_000 + i, "a", ""));
    const t = withBlock(blockContents([first, ...rest]), hex("ff"));
    expect(dataLoss(() => readTable(t, FILE)).message).toContain("the keys add up to more than 16 times the file's size");
  });

  it("index entries that lie: overlapping data blocks, bytes after a handle, separators out of order", () => {
    const contents = blockContents([entry(0, "a", "1")]);
    const block = withTrailer(contents);
    const meta = withTrailer(EMPTY_BLOCK);
    const table = (indexEntries: Uint8Array[], restarts: number[]): Uint8Array => {
      const index = blockContents(indexEntries, restarts);
      return concat(block, meta, withTrailer(index), footer(handle(block.length, EMPTY_BLOCK.length), handle(block.length + meta.length, index.length)));
    };
    const first = entry(0, "b", handle(0, contents.length));
    const again = table([first, entry(0, "c", handle(0, contents.length))], [0, first.length]);
    expect(dataLoss(() => readTable(again, FILE)).message).toContain("overlaps");
    const trailing = table([entry(0, "b", concat(handle(0, contents.length), [7]))], [0]);
    expect(dataLoss(() => readTable(trailing, FILE)).message).toContain("bytes after the data block's handle");
    const emptyBlockAt = block.length; // the metaindex is an empty block: a second "data" block
    const descending = table([first, entry(0, "a", handle(emptyBlockAt, EMPTY_BLOCK.length))], [0, first.length]);
    expect(dataLoss(() => readTable(descending, FILE)).message).toContain("index block's keys do not increase");
  });
});
