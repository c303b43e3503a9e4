/**
 * TensorBoard summaries in plain TypeScript, imported as `monitored-session/summary`: the
 * summary writer and its per-directory cache, summary values (scalars, text, tensors,
 * histograms, images), the `Event` proto types, the record reader, and the event reader
 * (`readEvents`, typed events over a file or a logdir, with a columnar scalar store). The wire
 * helpers (TFRecord framing, masked CRC32C, proto encoding) are internal. See docs/tensorboard.md.
 *
 * @module
 */

/* Writer */
export { SummaryWriter } from "./SummaryWriter.js";
export type { EventInput, SessionLogOptions, SessionLogStatus, SummaryWriterOptions } from "./SummaryWriter.js";
export { FileWriterCache, fileWriterCache } from "./FileWriterCache.js";
export { EventFileWriter, eventFileName } from "./EventFileWriter.js";
export type { EventFileWriterOptions, FlushInfo } from "./EventFileWriter.js";

/* Summary values */
export { PluginName, displayMetadata, pluginMetadata, scalarValue, tensorSummaryValue, textValue } from "./summaryValues.js";
export type { DisplayOptions, ScalarOptions, TensorSummaryMetadata } from "./summaryValues.js";
export { histogramValue } from "./histogram.js";
export type { Histogram, HistogramInput, HistogramOptions } from "./histogram.js";
export { imageValue } from "./image.js";
export type { ImageInput, PixelImage, PngImage } from "./image.js";

/* Summary ops */
export { summaries, toSummaryValues, type MarkedSummary, type MarkedSummaryKind, type TagOption } from "./summaryOps.js";

/* Event protos */
export { DataClass, DataType, SessionStatus } from "./EventProto.js";
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

/* Reading records */
export { CorruptRecordError, DEFAULT_MAX_RECORD_BYTES, iterateRecords, readRecordFile, readRecords } from "./recordReader.js";
export type { RecordReadEnd, RecordReadOptions, RecordReadResult, TfRecord } from "./recordReader.js";

/* Reading events */
/** Typed events over an event file or a logdir, optionally following new data. */
export { readEventBatches, readEvents, readEventsInto } from "./readEvents.js";
export type { EventSink, ReadEvent, ReadEventsOptions, ReadIssue } from "./readEvents.js";
/** One run's records into typed events; the numbers of a numeric tensor. */
export { EventDecoder, tensorNumbers } from "./EventDecoder.js";
export type {
  AudioEvent,
  EventHeader,
  FileVersionEvent,
  TagMetadataEvent,
  HistogramEvent,
  ImageEvent,
  ScalarEvent,
  ScalarSink,
  SessionLogEvent,
  SummaryEvent,
  TensorEvent,
  TextEvent,
} from "./EventDecoder.js";
/** Reads one event file incrementally by offset. */
export { EventFileTail } from "./EventFileTail.js";
export type { EventFileTailOptions, TailIssue, TailReadResult } from "./EventFileTail.js";
/** The runs of a logdir, as TensorBoard finds them. */
export { findRuns, isEventFileName } from "./findRuns.js";
export type { FindIssue, FoundRun, FoundRuns } from "./findRuns.js";

/* Scalar store */
/** Every point of one scalar series in typed-array columns; every series of a logdir. */
export { ScalarSeries } from "./ScalarSeries.js";
export { LogdirScalars } from "./LogdirScalars.js";
