import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Type } from 'typebox';
import { Page, PageQuery } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { ProjectParams, writeInProject } from '../projects/index.ts';
import {
  CreateVariableRequest,
  OverrideParams,
  Override,
  OverrideQuery,
  UpdateVariableRequest,
  Variable,
  VariableParams,
  VariableWithOverrides,
  WriteOverridesRequest,
  WriteOverridesResponse,
} from './schemas.ts';
import {
  createVariable,
  deleteOverride,
  deleteVariable,
  listVariables,
  readOverrides,
  updateVariable,
  writeOverrides,
} from './service.ts';

const tags = ['Project Variables'];

export async function variableRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/projects/:projectId/variables',
    {
      schema: {
        summary: 'List the project variables, by name',
        tags,
        params: ProjectParams,
        querystring: PageQuery,
        response: { 200: Page(Variable) },
      },
    },
    async (request) => {
      return listVariables(app.store.db, request.principal.accountId, request.params.projectId, request.query);
    },
  );

  app.post(
    '/projects/:projectId/variables',
    {
      schema: {
        summary: 'Create a project variable',
        tags,
        params: ProjectParams,
        body: CreateVariableRequest,
        response: { 201: Variable, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const { projectId } = request.params;
      const variable = await writeInProject(app.store.db, request.principal.accountId, projectId, async (trx) => {
        const created = await createVariable(trx, projectId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.variableName = created.name;
        return created;
      });
      return sendCreated(request, reply, { segment: variable.name }, variable);
    },
  );

  app.patch(
    '/projects/:projectId/variables/:variableName',
    {
      schema: {
        summary: 'Update a project variable; its name is immutable',
        tags,
        params: VariableParams,
        body: UpdateVariableRequest,
        response: { 200: Variable, ...problems(422) },
      },
    },
    async (request) => {
      const { projectId, variableName } = request.params;
      return writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        updateVariable(trx, projectId, variableName, request.body),
      );
    },
  );

  app.delete(
    '/projects/:projectId/variables/:variableName',
    {
      schema: {
        summary: 'Delete a project variable and all its environment overrides',
        tags,
        params: VariableParams,
        response: noContent('The variable and its overrides are deleted.'),
      },
    },
    async (request, reply) => {
      const { projectId, variableName } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteVariable(trx, projectId, variableName),
      );
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/projects/:projectId/variables/:variableName/environment-overrides',
    {
      schema: {
        summary: 'The variable with all its environment overrides, or the override of one environment',
        tags,
        params: VariableParams,
        querystring: OverrideQuery,
        response: {
          200: Type.Union([VariableWithOverrides, Override], {
            description: 'without environmentName: the variable with its overrides; with it: that one override',
          }),
        },
      },
    },
    async (request) => {
      const { projectId, variableName } = request.params;
      return readOverrides(app.store.db, request.principal.accountId, projectId, variableName, request.query.environmentName);
    },
  );

  app.post(
    '/projects/:projectId/variables/:variableName/environment-overrides',
    {
      schema: {
        summary: 'Create or update environment overrides of a variable',
        description: 'Overrides that cannot be written are answered in failedOverride with the reason; the others are written.',
        tags,
        params: VariableParams,
        body: WriteOverridesRequest,
        response: { 200: WriteOverridesResponse },
      },
    },
    async (request) => {
      const { projectId, variableName } = request.params;
      return writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        writeOverrides(trx, projectId, variableName, request.body),
      );
    },
  );

  app.delete(
    '/projects/:projectId/variables/:variableName/environment-overrides/:environmentName',
    {
      schema: {
        summary: 'Remove the override of one environment',
        tags,
        params: OverrideParams,
        response: noContent('The override is deleted.'),
      },
    },
    async (request, reply) => {
      const { projectId, variableName, environmentName } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteOverride(trx, projectId, variableName, environmentName),
      );
      return reply.code(204).send(null);
    },
  );
}
