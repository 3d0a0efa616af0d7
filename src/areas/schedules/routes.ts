import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page, PageQuery } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { pageInProject, ProjectParams, requireProject, writeInProject } from '../projects/index.ts';
import { CreateScheduleRequest, Schedule, ScheduleParams, ScheduleSummary, UpdateScheduleRequest } from './schemas.ts';
import { runPeriodically } from '../../core/ticker.ts';
import { createSchedule, deleteSchedule, getSchedule, listSchedules, runDueSchedules, updateSchedule } from './service.ts';

const tags = ['Schedules'];

/** A write with If-Match changes the schedule only at the version its check saw (core/conditional.ts). */
const rowVersion = { table: 'schedules', idParam: 'scheduleId' };

export async function scheduleRoutes(fastify: FastifyInstance): Promise<void> {
  // Due schedules start their runs (each due time once, across instances).
  runPeriodically(fastify, 'schedule ticker', fastify.config.schedulerIntervalMs, () =>
    runDueSchedules(fastify.store.db, fastify.config.scheduleCatchUpMs, fastify.config.hostedAgent),
  );
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/projects/:projectId/schedules',
    {
      schema: {
        summary: 'List the schedules of the project, by name',
        tags,
        params: ProjectParams,
        querystring: PageQuery,
        response: { 200: Page(ScheduleSummary) },
      },
    },
    async (request) =>
      pageInProject(app.store.db, request.principal.accountId, request.params.projectId, request.query, listSchedules),
  );

  app.post(
    '/projects/:projectId/schedules',
    {
      schema: {
        summary: 'Schedule a pipeline of an environment with a cron expression in a time zone',
        tags,
        params: ProjectParams,
        body: CreateScheduleRequest,
        response: { 201: Schedule, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId } = request.params;
      const schedule = await writeInProject(app.store.db, request.principal.accountId, projectId, async (trx) => {
        const created = await createSchedule(trx, projectId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.scheduleId = created.scheduleId;
        return created;
      });
      return sendCreated(request, reply, { segment: schedule.scheduleId }, schedule);
    },
  );

  app.get(
    '/projects/:projectId/schedules/:scheduleId',
    {
      schema: {
        summary: 'A schedule with its time zone and next due time',
        tags,
        params: ScheduleParams,
        response: { 200: Schedule },
      },
    },
    async (request) => {
      const { projectId, scheduleId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      return getSchedule(app.store.db, projectId, scheduleId);
    },
  );

  app.patch(
    '/projects/:projectId/schedules/:scheduleId',
    {
      config: { rowVersion },
      schema: {
        summary: 'Change a schedule, or enable or disable it (scheduleEnabled)',
        tags,
        params: ScheduleParams,
        body: UpdateScheduleRequest,
        response: { 200: Schedule, ...problems(409) },
      },
    },
    async (request) => {
      const { projectId, scheduleId } = request.params;
      return writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        updateSchedule(trx, projectId, scheduleId, request.body),
      );
    },
  );

  app.delete(
    '/projects/:projectId/schedules/:scheduleId',
    {
      config: { rowVersion },
      schema: {
        summary: 'Delete a schedule (its past runs stay)',
        tags,
        params: ScheduleParams,
        response: noContent('The schedule is deleted.'),
      },
    },
    async (request, reply) => {
      const { projectId, scheduleId } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteSchedule(trx, projectId, scheduleId),
      );
      return reply.code(204).send(null);
    },
  );
}
