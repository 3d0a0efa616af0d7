import type { FastifyReply, FastifyRequest } from 'fastify';

/** Where a created resource is addressed, relative to the collection the request was sent to. */
export type CreatedAt = { segment: string } | { query: Record<string, string> };

/**
 * Answers 201 with `body` and the `Location` of what it made: the request's path followed by the new
 * resource's path segment, or by the query parameters that address it (connections are addressed so).
 */
export function sendCreated<T>(request: FastifyRequest, reply: FastifyReply, at: CreatedAt, body: T) {
  const collection = request.url.split('?')[0].replace(/\/+$/, '');
  const location =
    'segment' in at ? `${collection}/${encodeURIComponent(at.segment)}` : `${collection}?${new URLSearchParams(at.query)}`;
  return reply.code(201).header('location', location).send(body);
}
