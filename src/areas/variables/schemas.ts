import { Type, type Static } from 'typebox';
import { ProjectParams } from '../projects/index.ts';
import { EnvironmentName } from '../environments/index.ts';
import { NOT_RESERVED_OBJECT_NAME } from '../../core/reserved-names.ts';

/** The specification's variableName: an identifier of letters, digits, `_` and `$`, not a digit first, not `$` alone. */
export const VARIABLE_NAME_PATTERN = '^(?!\\$$)[a-zA-Z_$][a-zA-Z0-9_$]*$';

export const VariableName = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: VARIABLE_NAME_PATTERN,
  // A run's variables are keyed by name (on the server and in agents): constructor, __proto__, ... are refused.
  ...NOT_RESERVED_OBJECT_NAME,
  examples: ['region_code'],
});

export const VARIABLE_TYPES = ['TEXT', 'NUMBER'] as const;
export type VariableType = (typeof VARIABLE_TYPES)[number];
const VariableTypeSchema = Type.Enum(VARIABLE_TYPES, {
  description: 'TEXT takes a JSON string as value, NUMBER a JSON number or a string of one ("1", kept as the number)',
});
const Behaviour = Type.Enum(['SHARED', 'COPIED'], {
  description: 'SHARED: one value across the pipelines of a run; COPIED: each pipeline gets its own copy',
});

/** A variable's or an override's value: it must fit the variable's type. */
export const VariableValue = Type.Union([Type.String({ maxLength: 65535 }), Type.Number()], { examples: ['eu-west-1', 42] });
export type VariableValue = Static<typeof VariableValue>;

const Description = Type.String({ maxLength: 4000 });

export const VariableParams = Type.Object({ ...ProjectParams.properties, variableName: VariableName });
export type VariableParams = Static<typeof VariableParams>;

export const OverrideParams = Type.Object({ ...VariableParams.properties, environmentName: EnvironmentName });

export const CreateVariableRequest = Type.Object(
  {
    name: VariableName,
    type: VariableTypeSchema,
    behaviour: Behaviour,
    description: Type.Optional(Description),
    value: Type.Optional(VariableValue),
    supportsDoubleResolution: Type.Optional(Type.Boolean({ default: false })),
  },
  { examples: [{ name: 'region_code', type: 'TEXT', behaviour: 'SHARED', description: 'Cloud region', value: 'eu-west-1' }] },
);
export type CreateVariableRequest = Static<typeof CreateVariableRequest>;

export const UpdateVariableRequest = Type.Object(
  {
    type: VariableTypeSchema,
    behaviour: Behaviour,
    description: Type.Optional(Description),
    value: Type.Optional(VariableValue),
    supportsDoubleResolution: Type.Optional(Type.Boolean()),
  },
  {
    description: 'type and behaviour are required even when unchanged; a field left out keeps its value; the name cannot change',
    examples: [{ type: 'NUMBER', behaviour: 'COPIED', value: 3 }],
  },
);
export type UpdateVariableRequest = Static<typeof UpdateVariableRequest>;

const variableExample = {
  id: '8c3d7a52-41f6-4b0e-9a53-2d6e8f1c0b47',
  name: 'region_code',
  type: 'TEXT',
  behaviour: 'SHARED',
  description: 'Cloud region',
  value: 'eu-west-1',
  supportsDoubleResolution: false,
};

export const Variable = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    type: VariableTypeSchema,
    behaviour: Behaviour,
    description: Type.Optional(Type.String()),
    value: Type.Optional(VariableValue),
    supportsDoubleResolution: Type.Boolean(),
  },
  { examples: [variableExample] },
);
export type Variable = Static<typeof Variable>;

export const Override = Type.Object(
  { environmentName: Type.String(), value: VariableValue },
  { examples: [{ environmentName: 'production', value: 'us-east-1' }] },
);
export type Override = Static<typeof Override>;

export const VariableWithOverrides = Type.Object(
  { ...Variable.properties, overrides: Type.Array(Override) },
  { examples: [{ ...variableExample, overrides: [{ environmentName: 'production', value: 'us-east-1' }] }] },
);

export const OverrideQuery = Type.Object({
  environmentName: Type.Optional(EnvironmentName),
});

export const WriteOverridesRequest = Type.Array(Type.Object({ environmentName: EnvironmentName, value: VariableValue }), {
  minItems: 1,
  maxItems: 1000,
  examples: [
    [
      { environmentName: 'production', value: 'us-east-1' },
      { environmentName: 'test', value: 'eu-west-2' },
    ],
  ],
});
export type WriteOverridesRequest = Static<typeof WriteOverridesRequest>;

export const WriteOverridesResponse = Type.Object(
  {
    overrides: Type.Array(Override, { description: 'the overrides written, created or updated' }),
    failedOverride: Type.Array(Type.Object({ environmentName: Type.String(), reason: Type.String() }), {
      description: 'the overrides that could not be written, each with why',
    }),
  },
  {
    examples: [
      {
        overrides: [{ environmentName: 'production', value: 'us-east-1' }],
        failedOverride: [{ environmentName: 'staging', reason: 'The environment does not exist in this project.' }],
      },
    ],
  },
);
export type WriteOverridesResponse = Static<typeof WriteOverridesResponse>;
