/**
 * Errors the deskgrid API answers, as exceptions. Each failed call throws a
 * {@link DeskgridError} subclass chosen by the gRPC code in the reply's JSON
 * body (`{"code": 5, "message": ...}`), or by the HTTP status when the body
 * has none.
 */

export interface ErrorInit {
  /** HTTP status of the reply (0 when the error came inside a stream). */
  status?: number;
  /** gRPC status code (3 InvalidArgument, 5 NotFound, ...). */
  code?: number;
  details?: unknown[];
  /** Seconds the server asked to wait before trying again. */
  retryAfter?: number;
  cause?: unknown;
}

/** A call deskgrid refused or could not complete. */
export class DeskgridError extends Error {
  /** The gRPC code this class stands for. */
  static readonly grpcCode: number = 2;
  readonly status: number;
  readonly code: number;
  readonly details: unknown[];
  readonly retryAfter?: number;

  constructor(message: string, init: ErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status ?? 0;
    this.code = init.code ?? (new.target as typeof DeskgridError).grpcCode;
    this.details = init.details ?? [];
    this.retryAfter = init.retryAfter;
  }
}

export class Cancelled extends DeskgridError { static override readonly grpcCode = 1; }
export class Unknown extends DeskgridError { static override readonly grpcCode = 2; }
export class InvalidArgument extends DeskgridError { static override readonly grpcCode = 3; }
export class DeadlineExceeded extends DeskgridError { static override readonly grpcCode = 4; }
export class NotFound extends DeskgridError { static override readonly grpcCode = 5; }
export class AlreadyExists extends DeskgridError { static override readonly grpcCode = 6; }
export class PermissionDenied extends DeskgridError { static override readonly grpcCode = 7; }
export class ResourceExhausted extends DeskgridError { static override readonly grpcCode = 8; }
export class FailedPrecondition extends DeskgridError { static override readonly grpcCode = 9; }
export class Aborted extends DeskgridError { static override readonly grpcCode = 10; }
export class OutOfRange extends DeskgridError { static override readonly grpcCode = 11; }
export class Unimplemented extends DeskgridError { static override readonly grpcCode = 12; }
export class Internal extends DeskgridError { static override readonly grpcCode = 13; }
export class Unavailable extends DeskgridError { static override readonly grpcCode = 14; }
export class DataLoss extends DeskgridError { static override readonly grpcCode = 15; }
export class Unauthenticated extends DeskgridError { static override readonly grpcCode = 16; }
/** A stream ended without the message that finishes it. */
export class StreamError extends DeskgridError { static override readonly grpcCode = 14; }

const byCode = new Map<number, typeof DeskgridError>(
  [Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
    ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal, Unavailable,
    DataLoss, Unauthenticated].map((c) => [c.grpcCode, c]),
);

const byStatus: Record<number, number> = {
  400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 412: 9, 429: 8, 499: 1, 500: 13, 501: 12, 503: 14, 504: 4,
};

/** The exception for an error reply; `body` is its parsed JSON (or text). */
export function errorFromReply(status: number, body: unknown, retryAfter?: number): DeskgridError {
  let code: number | undefined;
  let message = '';
  let details: unknown[] = [];
  const inner = (body as { error?: unknown } | null)?.error;
  if (inner && typeof inner === 'object') body = inner; // a stream's error line, sent as the whole reply
  if (body && typeof body === 'object') {
    const b = body as { code?: unknown; message?: unknown; details?: unknown };
    if (typeof b.code === 'number') code = b.code;
    if (typeof b.message === 'string') message = b.message;
    if (Array.isArray(b.details)) details = b.details;
  } else if (typeof body === 'string') {
    message = body.trim();
  }
  if (!code) code = byStatus[status] ?? 2;
  if (!message) message = status ? `HTTP ${status}` : 'error';
  const Cls = byCode.get(code) ?? DeskgridError;
  return new Cls(message, { status, code, details, retryAfter });
}
