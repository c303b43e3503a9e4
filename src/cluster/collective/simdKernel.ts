/**
 * The ring's reduction as a WebAssembly SIMD kernel: `dst = (src + dst) / divisor`, four float32
 * or two float64 lanes per instruction. V8 does not vectorize JavaScript loops, and the reduction
 * was the largest part of an all-reduce's CPU beyond moving the bytes (docs/performance.md,
 * "Ring all-reduce"); a kernel of four instructions is why this is written by hand instead of
 * taken from a library (npm has no SIMD reduction for Node buffers).
 *
 * The module is assembled here from named opcodes (no binary blob): one page of memory holding
 * two blocks (the received bytes at 0, the destination's at {@link BLOCK_BYTES}), and one
 * function per element type and divisor case, each a loop over 16-byte vectors. The caller
 * copies each block in and out of that memory; the copies are memcpy and cost far less than the
 * scalar loop they replace.
 *
 * The bits equal the scalar loop's ({@link reduceInto} without the kernel): float32 addition and
 * division rounded once to float32 equal the same operations done in float64 and rounded to
 * float32 (double rounding is innocuous when the wider format has at least 2p + 2 bits: 53 ≥ 50),
 * and the divisor (the group size) is exact in float32. Only a NaN's payload may differ. The ring
 * reduces each element on one rank and copies it to the others, so its replicas agree either
 * way; the exchange of two ranks reduces each element on both, with the same operands in the
 * same order, so they agree when both run the same loop (both have WebAssembly SIMD, as every
 * Node since 16 does).
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Bytes per block: each call of a kernel function covers at most this many bytes of each operand. */
export const BLOCK_BYTES = 32 * 1024;

/** An instantiated kernel: its memory and the four loops over `[0, bytes)` (a multiple of 16). */
export interface SimdKernel {
  /** The kernel's memory: source block at 0, destination block at {@link BLOCK_BYTES}. */
  readonly bytes: Uint8Array;
  readonly f32: Float32Array;
  readonly f64: Float64Array;
  /** `dst += src` over `bytes` bytes (a multiple of 16) of both blocks. */
  addF32(bytes: number): void;
  addF64(bytes: number): void;
  /** `dst = (src + dst) / divisor`. */
  addDivF32(bytes: number, divisor: number): void;
  addDivF64(bytes: number, divisor: number): void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The kernel, or `undefined` where WebAssembly or its SIMD extension is not available (the
 * scalar loops serve then, with the same bits). Instantiated once, synchronously (the module is
 * a few hundred bytes).
 */
export const loadSimdKernel = (): SimdKernel | undefined => {
  const wasm = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;
  if (wasm === undefined) return undefined;
  const bytes = assemble();
  if (!wasm.validate(bytes)) return undefined;
  try {
    const x = new wasm.Instance(new wasm.Module(bytes)).exports as Exports;
    const buffer = x.memory.buffer;
    const src = 0;
    const dst = BLOCK_BYTES;
    return {
      bytes: new Uint8Array(buffer),
      f32: new Float32Array(buffer),
      f64: new Float64Array(buffer),
      addF32: (n) => x.addF32(dst, src, n),
      addF64: (n) => x.addF64(dst, src, n),
      addDivF32: (n, d) => x.addDivF32(dst, src, n, d),
      addDivF64: (n, d) => x.addDivF64(dst, src, n, d),
    };
  } catch {
    // A runtime that validates but refuses to compile (a policy, a memory limit): the scalar loops serve.
    return undefined;
  }
};

// ---------------------------------------------------------------------------------------------
// utils: the module, from opcodes
// ---------------------------------------------------------------------------------------------

/** The part of the WebAssembly API used here (the project's TypeScript libraries do not declare it). */
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  readonly Module: new (bytes: Uint8Array) => object;
  readonly Instance: new (module: object) => { readonly exports: unknown };
}

interface Exports {
  readonly memory: { readonly buffer: ArrayBuffer };
  addF32(dst: number, src: number, bytes: number): void;
  addDivF32(dst: number, src: number, bytes: number, divisor: number): void;
  addF64(dst: number, src: number, bytes: number): void;
  addDivF64(dst: number, src: number, bytes: number, divisor: number): void;
}

const I32 = 0x7f;
const F32 = 0x7d;
const F64 = 0x7c;
const V128 = 0x7b;
const FUNC = 0x60;
const BLOCK = 0x02;
const LOOP = 0x03;
const EMPTY = 0x40;
const END = 0x0b;
const BR = 0x0c;
const BR_IF = 0x0d;
const LOCAL_GET = 0x20;
const LOCAL_SET = 0x21;
const I32_CONST = 0x41;
const I32_GE_U = 0x4f;
const I32_ADD = 0x6a;
/** The SIMD prefix and the opcodes used after it. */
const SIMD = 0xfd;
const V128_LOAD = 0x00;
const V128_STORE = 0x0b;
const F32X4_SPLAT = 0x13;
const F64X2_SPLAT = 0x14;
const F32X4_ADD = 0xe4;
const F32X4_DIV = 0xe7;
const F64X2_ADD = 0xf0;
const F64X2_DIV = 0xf3;
/** A 16-byte access at a 16-byte aligned address (log2 of the alignment, then the offset). */
const MEMARG = [4, 0];
const SECTION = { type: 1, function: 3, memory: 5, export: 7, code: 10 } as const;
const EXPORT_FUNC = 0;
const EXPORT_MEMORY = 2;

/** Unsigned LEB128. */
const leb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
};

const vec = (items: readonly (readonly number[])[]): number[] => [...leb(items.length), ...items.flat()];
const section = (id: number, body: readonly number[]): number[] => [id, ...leb(body.length), ...body];
const name = (s: string): number[] => [...leb(s.length), ...Buffer.from(s, "utf8")];
const simd = (op: number): number[] => [SIMD, ...leb(op)];

/**
 * One kernel function. Parameters: dst, src, bytes (and the divisor when `div` is given).
 * `for (end = dst + bytes; dst < end; dst += 16, src += 16) v128[dst] = (v128[src] + v128[dst]) [/ d]`.
 */
const kernel = (add: number, div?: { readonly op: number; readonly splat: number }): number[] => {
  const [DST, SRC, BYTES, DIVISOR] = [0, 1, 2, 3];
  const LAST = div === undefined ? 3 : 4;
  const DIVISORS = 5;
  const locals = div === undefined ? [[1, I32]] : [[1, I32], [1, V128]];
  const code = [
    LOCAL_GET, DST, LOCAL_GET, BYTES, I32_ADD, LOCAL_SET, LAST,
    ...(div === undefined ? [] : [LOCAL_GET, DIVISOR, ...simd(div.splat), LOCAL_SET, DIVISORS]),
    BLOCK, EMPTY, LOOP, EMPTY,
    LOCAL_GET, DST, LOCAL_GET, LAST, I32_GE_U, BR_IF, 1,
    LOCAL_GET, DST,
    LOCAL_GET, SRC, ...simd(V128_LOAD), ...MEMARG,
    LOCAL_GET, DST, ...simd(V128_LOAD), ...MEMARG,
    ...simd(add),
    ...(div === undefined ? [] : [LOCAL_GET, DIVISORS, ...simd(div.op)]),
    ...simd(V128_STORE), ...MEMARG,
    LOCAL_GET, DST, I32_CONST, 16, I32_ADD, LOCAL_SET, DST,
    LOCAL_GET, SRC, I32_CONST, 16, I32_ADD, LOCAL_SET, SRC,
    BR, 0, END, END,
    END,
  ];
  const body = [...vec(locals), ...code];
  return [...leb(body.length), ...body];
};

const assemble = (): Uint8Array => {
  const plain = [FUNC, 3, I32, I32, I32, 0];
  const withF32 = [FUNC, 4, I32, I32, I32, F32, 0];
  const withF64 = [FUNC, 4, I32, I32, I32, F64, 0];
  const pages = (2 * BLOCK_BYTES) / 65536;
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(SECTION.type, vec([plain, withF32, withF64])),
    ...section(SECTION.function, vec([[0], [1], [0], [2]])),
    ...section(SECTION.memory, vec([[0, ...leb(pages)]])),
    ...section(
      SECTION.export,
      vec([
        [...name("memory"), EXPORT_MEMORY, 0],
        [...name("addF32"), EXPORT_FUNC, 0],
        [...name("addDivF32"), EXPORT_FUNC, 1],
        [...name("addF64"), EXPORT_FUNC, 2],
        [...name("addDivF64"), EXPORT_FUNC, 3],
      ]),
    ),
    ...section(
      SECTION.code,
      vec([
        kernel(F32X4_ADD),
        kernel(F32X4_ADD, { op: F32X4_DIV, splat: F32X4_SPLAT }),
        kernel(F64X2_ADD),
        kernel(F64X2_ADD, { op: F64X2_DIV, splat: F64X2_SPLAT }),
      ]),
    ),
  ]);
};
