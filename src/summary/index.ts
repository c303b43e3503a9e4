/**
 * TensorBoard summaries in plain TypeScript: event files (TFRecord framing of `Event` protos),
 * the summary writer and its per-directory cache, and a record reader.
 *
 * @module
 */

/* Writer */
export { SummaryWriter, checkStep } from "./SummaryWriter.js";
export type { EventInput, SessionLogOptions, SessionLogStatus, SummaryWriterOptions } from "./SummaryWriter.js";
export { FileWriterCache, fileWriterCache } from "./FileWriterCache.js";
export { EventFileWriter, FILE_VERSION, eventFileName } from "./EventFileWriter.js";
export type { EventFileWriterOptions, FlushInfo } from "./EventFileWriter.js";

/* Summary values */
export {
  PluginName,
  checkTag,
  displayMetadata,
  pluginMetadata,
  scalarValue,
  tensorSummaryValue,
  textValue,
  toTensorProto,
} from "./summaryValues.js";
export type { DisplayOptions, ScalarOptions, TensorSummaryMetadata } from "./summaryValues.js";
export { DEFAULT_HISTOGRAM_BUCKETS, computeHistogram, histogramProto, histogramValue } from "./histogram.js";
export type { Histogram, HistogramInput, HistogramOptions } from "./histogram.js";
export { encodePixels, imageValue, pngSummaryImage } from "./image.js";
export type { ImageInput, PixelImage, PngImage } from "./image.js";

/* Summary ops */
export {
  markedSummaryKind,
  summaries,
  toSummaryValues,
  type MarkedSummary,
  type MarkedSummaryKind,
  type TagOption,
} from "./summaryOps.js";

/* Protos */
export { DataClass, DataType, SessionStatus, encodeEvent, encodeSummary, writeEvent, writeSummary } from "./EventProto.js";
export type {
  Colorspace,
  EventProto,
  HistogramProto,
  Int64,
  PluginData,
  SessionLog,
  SourceMetadata,
  Summary,
  SummaryAudio,
  SummaryImage,
  SummaryMetadata,
  SummaryValue,
  TaggedRunMetadata,
  TensorProto,
  TensorShapeDim,
  TensorShapeProto,
} from "./EventProto.js";

/* TFRecord framing */
export { RECORD_FOOTER_BYTES, RECORD_HEADER_BYTES, RecordBuffer, frameRecord, framedLength } from "./recordWriter.js";
export { iterateRecords, readRecordFile, readRecords } from "./recordReader.js";
export type { RecordReadEnd, RecordReadOptions, RecordReadResult, TfRecord } from "./recordReader.js";
export { CRC32C_MASK_DELTA, crc32c, maskCrc32c, maskedCrc32c, unmaskCrc32c } from "./maskedCrc32c.js";
