import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { ProjectId } from '../projects/index.ts';

const EXAMPLE_ID = '3c9f1e2a-5b7d-4e8f-9a1b-2c3d4e5f6a7b';

export const WebhookId = Type.String({ pattern: '^[0-9a-fA-F-]{36}$', description: 'webhook id (UUID)' });
export const WebhookParams = Type.Object({ webhookId: WebhookId });
export const DeliveryParams = Type.Object({ webhookId: WebhookId, deliveryId: WebhookId });

const EventType = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^[a-z0-9*][a-z0-9.*-]*$',
  description: 'an event type, or a prefix ending in `*`',
});
const EventTypes = Type.Array(EventType, {
  maxItems: 100,
  description: 'The types sent (`pipeline-execution.finished`, `environments.*`); every type when empty.',
});
const WebhookUrl = Type.String({
  minLength: 1,
  maxLength: 2048,
  description:
    'http(s) URL the events are POSTed to; it must be reachable under the outbound address rules and hold no credential (no user or password, no credential query parameter such as `token`, `sig`, `code`): 422 naming `body.url`.',
});

export const CreateWebhookRequest = Type.Object(
  {
    url: WebhookUrl,
    description: Type.Optional(Type.String({ maxLength: 1000 })),
    eventTypes: Type.Optional(EventTypes),
    projectId: Type.Optional({
      ...ProjectId,
      description: "Only this project's events; a project of the account (422 otherwise).",
    }),
    enabled: Type.Optional(Type.Boolean({ default: true })),
  },
  {
    additionalProperties: false,
    examples: [{ url: 'https://hooks.example.com/dpc', eventTypes: ['pipeline-execution.finished'], description: 'run results' }],
  },
);
export type CreateWebhookRequest = Static<typeof CreateWebhookRequest>;

export const UpdateWebhookRequest = Type.Object(
  {
    url: Type.Optional(WebhookUrl),
    description: Type.Optional(Type.Union([Type.String({ maxLength: 1000 }), Type.Null()])),
    eventTypes: Type.Optional(EventTypes),
    projectId: Type.Optional(Type.Union([ProjectId, Type.Null()])),
    enabled: Type.Optional(
      Type.Boolean({ description: 'true re-enables a webhook the server disabled, and clears its failures.' }),
    ),
  },
  { additionalProperties: false, examples: [{ enabled: true }] },
);
export type UpdateWebhookRequest = Static<typeof UpdateWebhookRequest>;

export const Webhook = Type.Object(
  {
    webhookId: Type.String(),
    url: Type.String(),
    description: Type.Optional(Type.String()),
    eventTypes: Type.Array(Type.String()),
    projectId: Type.Optional(Type.String()),
    enabled: Type.Boolean(),
    disabledReason: Type.Optional(Type.String({ description: 'Why the server disabled it.' })),
    consecutiveFailures: Type.Integer({ description: 'Deliveries in a row that failed every try.' }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      {
        webhookId: EXAMPLE_ID,
        url: 'https://hooks.example.com/dpc',
        eventTypes: ['pipeline-execution.finished'],
        enabled: true,
        consecutiveFailures: 0,
        createdAt: '2026-11-25T09:00:00.000Z',
        updatedAt: '2026-11-25T09:00:00.000Z',
      },
    ],
  },
);
export type Webhook = Static<typeof Webhook>;

export const CreatedWebhook = Type.Object(
  {
    ...Webhook.properties,
    signingSecret: Type.String({
      description: 'The HMAC-SHA256 key of the X-Signature header. Shown this once: store it now.',
    }),
  },
  {
    examples: [
      {
        ...(Webhook as unknown as { examples: object[] }).examples[0],
        signingSecret: 'whsec_3q2+7w0VfL1xKzYt4f9pQ8mN5bR6cD1eF2gH3iJ4kL8=',
      },
    ],
  },
);

export const SigningSecret = Type.Object(
  { signingSecret: Type.String({ description: 'The new signing secret; the old one stops at once. Shown this once.' }) },
  { examples: [{ signingSecret: 'whsec_9Zx+8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8Cb7Aa6=' }] },
);

export const DeliveryQuery = Type.Object({
  ...PageQuery.properties,
  status: Type.Optional(Type.Union([Type.Literal('PENDING'), Type.Literal('SUCCEEDED'), Type.Literal('FAILED')])),
});

export const WebhookDelivery = Type.Object(
  {
    deliveryId: Type.String(),
    eventId: Type.Integer({ description: 'The outbox event id; also the X-Event-Id header of every try.' }),
    eventType: Type.String(),
    status: Type.String({ description: 'PENDING (tries left), SUCCEEDED (a 2xx answer) or FAILED (every try failed).' }),
    attempts: Type.Integer(),
    nextAttemptAt: Type.Optional(Type.String({ format: 'date-time' })),
    lastAttemptAt: Type.Optional(Type.String({ format: 'date-time' })),
    lastStatusCode: Type.Optional(Type.Integer({ description: "The receiver's status at the last try." })),
    lastResponse: Type.Optional(
      Type.String({
        description:
          "What the receiver's last answer was: its size and content type (`2 bytes of text/plain`), never its body (a URL may reach an internal service).",
      }),
    ),
    lastError: Type.Optional(Type.String({ description: 'Why the last try got no answer (timeout, refused address, ...).' })),
    createdAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      {
        deliveryId: '8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d',
        eventId: 1042,
        eventType: 'pipeline-execution.finished',
        status: 'SUCCEEDED',
        attempts: 1,
        lastAttemptAt: '2026-11-25T09:30:01.000Z',
        lastStatusCode: 200,
        lastResponse: '2 bytes of text/plain',
        createdAt: '2026-11-25T09:30:00.500Z',
      },
    ],
  },
);
export type WebhookDelivery = Static<typeof WebhookDelivery>;
