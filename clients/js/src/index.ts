/**
 * A client of Taskhoster, the durable task-queue server: producers post
 * tasks, read their status, watch them to the end and cancel them; a
 * Worker works a queue over the worker socket (SPEC §3, §4, §11, §12).
 */
export { Client, type ClientOptions, type CallOptions } from "./client.js";
export { Worker, Task, type Handler, type Outcome, type WorkerOptions, type Logger } from "./worker.js";
export { TaskhosterError, Release, Failure, CancelledError, type Violation } from "./errors.js";
export type { Ack, BatchOptions, JSONValue, Lease, Posted, PostOptions, Status, View } from "./types.js";
