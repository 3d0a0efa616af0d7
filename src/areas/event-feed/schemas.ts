import { Type } from 'typebox';
import { ProjectId } from '../projects/index.ts';

const EVENT_ID = '^[0-9]{1,15}$';

export const EventStreamQuery = Type.Object({
  type: Type.Optional(
    Type.String({
      maxLength: 2000,
      description:
        'Comma-separated event types to receive; a type ending in `*` is a prefix (`pipeline-execution.*`). All types when absent.',
    }),
  ),
  projectId: Type.Optional(ProjectId),
  lastEventId: Type.Optional(
    Type.String({
      pattern: EVENT_ID,
      description: 'Resume after this event id, as the Last-Event-ID header does (for clients that cannot set headers).',
    }),
  ),
});

export const EventStreamHeaders = Type.Object({
  'last-event-id': Type.Optional(
    Type.String({
      pattern: EVENT_ID,
      description: 'Resume after this event id: the id of the last event received, on this or any other server instance.',
    }),
  ),
});

/** The JSON of each event's `data:` line. */
export const StreamedEvent = Type.Object(
  {
    id: Type.Integer({
      description: 'Counts from 1 per account without gaps; the SSE `id:` line and the Last-Event-ID to resume from.',
    }),
    type: Type.String({ description: 'Also the SSE `event:` line.' }),
    occurredAt: Type.String({ format: 'date-time' }),
    projectId: Type.Union([Type.String(), Type.Null()]),
    subject: Type.String({ description: 'What the event is about, path-like.' }),
    data: Type.Record(Type.String(), Type.Unknown()),
  },
  {
    examples: [
      {
        id: 1042,
        type: 'pipeline-execution.finished',
        occurredAt: '2026-11-25T09:30:00.000Z',
        projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
        subject: 'pipeline-executions/6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f',
        data: { executionId: '6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f', status: 'SUCCESS', previousStatus: 'RUNNING' },
      },
    ],
  },
);
