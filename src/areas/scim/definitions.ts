/**
 * The SCIM schemas this server implements, in RFC 7643 section 7 form. They are served at /Schemas and
 * drive everything else: which attributes a resource keeps and of what type, which are read-only or never
 * returned, which compare case-exactly in filters, and what `attributes`/`excludedAttributes` name.
 */

export const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';
/** The specification's group fields beyond core SCIM (accountId, projectId, role, ...). */
export const GROUP_EXTENSION_SCHEMA = 'urn:matillion:params:scim:schemas:extension:dpc:2.0:Group';
export const LIST_RESPONSE_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const PATCH_OP_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
export const ERROR_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:Error';
export const SEARCH_REQUEST_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';
/** The largest page a list answers (filter.maxResults of /ServiceProviderConfig). */
export const MAX_RESULTS = 1000;

export type AttributeType = 'string' | 'boolean' | 'dateTime' | 'reference' | 'binary' | 'complex';

export interface AttributeDefinition {
  name: string;
  type: AttributeType;
  multiValued: boolean;
  description: string;
  required: boolean;
  caseExact: boolean;
  mutability: 'readOnly' | 'readWrite' | 'immutable' | 'writeOnly';
  returned: 'always' | 'never' | 'default' | 'request';
  uniqueness: 'none' | 'server' | 'global';
  subAttributes?: AttributeDefinition[];
  canonicalValues?: string[];
  referenceTypes?: string[];
}

type Options = Partial<Omit<AttributeDefinition, 'name' | 'type' | 'description'>>;

function attribute(name: string, type: AttributeType, description: string, options: Options = {}): AttributeDefinition {
  return {
    name,
    type,
    multiValued: false,
    description,
    required: false,
    caseExact: false,
    mutability: 'readWrite',
    returned: 'default',
    uniqueness: 'none',
    ...options,
  };
}

const text = (name: string, description: string, options: Options = {}) => attribute(name, 'string', description, options);

/** The sub-attributes the specification gives emails, phoneNumbers, ims, photos, roles, entitlements and x509Certificates. */
function plural(name: string, description: string, value: AttributeDefinition, typeValues?: string[]): AttributeDefinition {
  return attribute(name, 'complex', description, {
    multiValued: true,
    subAttributes: [
      value,
      text('display', 'A human-readable name, primarily used for display purposes.'),
      text('type', 'A label indicating the function of the value.', typeValues ? { canonicalValues: typeValues } : {}),
      attribute('primary', 'boolean', 'Whether this is the preferred value; at most one value is primary.'),
    ],
  });
}

export const commonAttributes: AttributeDefinition[] = [
  text('id', 'Identifier of the resource, issued by this server.', {
    caseExact: true,
    mutability: 'readOnly',
    returned: 'always',
    uniqueness: 'server',
  }),
  text('externalId', 'Identifier of the resource in the provisioning client.', { caseExact: true }),
];

/** meta is not in the /Schemas listing of a resource (RFC 7643 3.1) but filters and sorts may name its parts. */
export const metaAttribute = attribute('meta', 'complex', 'Resource metadata.', {
  mutability: 'readOnly',
  subAttributes: [
    text('resourceType', 'User or Group.', { caseExact: true, mutability: 'readOnly' }),
    attribute('created', 'dateTime', 'When the resource was added.', { mutability: 'readOnly' }),
    attribute('lastModified', 'dateTime', 'When the resource was last changed.', { mutability: 'readOnly' }),
    attribute('location', 'reference', 'URI of the resource.', { caseExact: true, mutability: 'readOnly' }),
    text('version', 'Version of the resource (its ETag).', { caseExact: true, mutability: 'readOnly' }),
  ],
});

export const userAttributes: AttributeDefinition[] = [
  text('userName', 'Unique identifier of the user, case-insensitively unique in the account.', {
    required: true,
    uniqueness: 'server',
  }),
  attribute('name', 'complex', "The components of the user's name.", {
    subAttributes: [
      text('formatted', 'The full name, formatted for display.'),
      text('familyName', 'The family name.'),
      text('givenName', 'The given name.'),
      text('middleName', 'The middle name(s).'),
      text('honorificPrefix', 'The honorific prefix(es), e.g. "Ms.".'),
      text('honorificSuffix', 'The honorific suffix(es), e.g. "III".'),
    ],
  }),
  text('displayName', 'The name of the user, suitable for display.'),
  text('nickName', 'The casual way to address the user.'),
  attribute('profileUrl', 'reference', "A URI of the user's online profile.", { referenceTypes: ['external'] }),
  text('title', "The user's title, e.g. Vice President."),
  text('userType', 'The relationship between the organization and the user, e.g. Employee.'),
  text('preferredLanguage', "The user's preferred written or spoken language (RFC 7231 Accept-Language form)."),
  text('locale', "The user's default location, e.g. en-US."),
  text('timezone', "The user's time zone (IANA name, e.g. Europe/Paris)."),
  attribute('active', 'boolean', "The user's administrative status."),
  text('password', "The user's clear-text password: written only, kept as a slow hash, never returned.", {
    mutability: 'writeOnly',
    returned: 'never',
    caseExact: true,
  }),
  plural('emails', 'Email addresses of the user.', text('value', 'An email address.'), ['work', 'home', 'other']),
  plural('phoneNumbers', 'Phone numbers of the user.', text('value', 'A phone number.'), [
    'work',
    'home',
    'mobile',
    'fax',
    'pager',
    'other',
  ]),
  plural('ims', 'Instant messaging addresses of the user.', text('value', 'An instant messaging address.')),
  plural(
    'photos',
    'URLs of photos of the user.',
    attribute('value', 'reference', 'URL of a photo.', { referenceTypes: ['external'], caseExact: true }),
    ['photo', 'thumbnail'],
  ),
  attribute('addresses', 'complex', 'Physical mailing addresses of the user.', {
    multiValued: true,
    subAttributes: [
      text('formatted', 'The full mailing address, formatted for display.'),
      text('streetAddress', 'The full street address.'),
      text('locality', 'The city or locality.'),
      text('region', 'The state or region.'),
      text('postalCode', 'The zip code or postal code.'),
      text('country', 'The country name (ISO 3166-1 alpha-2 code).'),
      text('display', 'A human-readable name, primarily used for display purposes.'),
      text('type', 'A label indicating the function of the address.', { canonicalValues: ['work', 'home', 'other'] }),
      attribute('primary', 'boolean', 'Whether this is the preferred address.'),
    ],
  }),
  attribute('groups', 'complex', "The groups the user belongs to, from the groups' members (read-only).", {
    multiValued: true,
    mutability: 'readOnly',
    subAttributes: [
      text('value', 'The id of the group.', { caseExact: true, mutability: 'readOnly' }),
      attribute('$ref', 'reference', 'The URI of the group.', {
        referenceTypes: ['Group'],
        caseExact: true,
        mutability: 'readOnly',
      }),
      text('display', 'The displayName of the group.', { mutability: 'readOnly' }),
      text('type', 'How the user belongs to the group: DIRECT (groups do not nest here).', {
        canonicalValues: ['DIRECT'],
        mutability: 'readOnly',
      }),
    ],
  }),
  plural('entitlements', 'Entitlements of the user.', text('value', 'An entitlement.')),
  plural('roles', 'Roles of the user, as the directory names them.', text('value', 'A role.')),
  plural(
    'x509Certificates',
    'X.509 certificates of the user.',
    attribute('value', 'binary', 'A DER certificate, base64.', { caseExact: true }),
  ),
];

export const groupAttributes: AttributeDefinition[] = [
  text('displayName', 'A human-readable name for the group.', { required: true }),
  attribute('members', 'complex', 'The users in the group.', {
    multiValued: true,
    subAttributes: [
      text('value', 'The id of a user of the account.', { caseExact: true, mutability: 'immutable' }),
      attribute('$ref', 'reference', 'The URI of the user.', {
        referenceTypes: ['User'],
        caseExact: true,
        mutability: 'immutable',
      }),
      text('display', 'The displayName (else userName) of the user.', { mutability: 'readOnly' }),
      text('type', 'The type of the member: USER (groups do not nest here).', {
        canonicalValues: ['USER'],
        mutability: 'immutable',
      }),
    ],
  }),
];

export const groupExtensionAttributes: AttributeDefinition[] = [
  text('accountId', 'The account the group belongs to.', { mutability: 'readOnly', caseExact: true }),
  text('accountName', 'The name of that account.', { mutability: 'readOnly' }),
  text('projectId', 'A project of the account: with role, the group grants that role in the project to its members.', {
    caseExact: true,
  }),
  text('projectName', 'The name of that project.', { mutability: 'readOnly' }),
  text('environment', 'The name of an environment the grant is meant for (kept as given).'),
  text('role', 'The role the group grants in projectId to its members.', { canonicalValues: ['viewer', 'developer', 'admin'] }),
];

export interface SchemaDefinition {
  id: string;
  name: string;
  description: string;
  attributes: AttributeDefinition[];
}

export const SCHEMAS: SchemaDefinition[] = [
  { id: USER_SCHEMA, name: 'User', description: 'User Account', attributes: userAttributes },
  { id: GROUP_SCHEMA, name: 'Group', description: 'Group', attributes: groupAttributes },
  {
    id: GROUP_EXTENSION_SCHEMA,
    name: 'DpcGroup',
    description: "The specification's group fields: the account, and the role the group grants in a project.",
    attributes: groupExtensionAttributes,
  },
];

export type ResourceType = 'User' | 'Group';

export interface ResourceKind {
  type: ResourceType;
  endpoint: string;
  schema: string;
  extensions: string[];
  /** Every attribute a resource of this kind may carry, core and extension alike, at the top level. */
  attributes: AttributeDefinition[];
}

export const USER: ResourceKind = {
  type: 'User',
  endpoint: '/Users',
  schema: USER_SCHEMA,
  extensions: [],
  attributes: [...commonAttributes, ...userAttributes, metaAttribute],
};

export const GROUP: ResourceKind = {
  type: 'Group',
  endpoint: '/Groups',
  schema: GROUP_SCHEMA,
  extensions: [GROUP_EXTENSION_SCHEMA],
  attributes: [...commonAttributes, ...groupAttributes, ...groupExtensionAttributes, metaAttribute],
};

/** The definition an attribute path names ("name.familyName", "emails.value"), case-insensitively. */
export function definitionAt(kind: ResourceKind, path: string[]): AttributeDefinition | undefined {
  let candidates = kind.attributes;
  let found: AttributeDefinition | undefined;
  for (const segment of path) {
    found = candidates.find((a) => a.name.toLowerCase() === segment.toLowerCase());
    if (!found) return undefined;
    candidates = found.subAttributes ?? [];
  }
  return found;
}

/**
 * The attributes a schema URN prefix may name ("urn:...:dpc:2.0:Group:role"): an extension's own, or the core
 * schema's (with id, externalId and meta) for the core URN. An extension never names a core attribute.
 */
export function attributesOfSchema(kind: ResourceKind, urn: string): AttributeDefinition[] {
  const lower = urn.toLowerCase();
  const ofExtension = (u: string) => SCHEMAS.find((s) => s.id === u)?.attributes ?? [];
  const extension = kind.extensions.find((u) => u.toLowerCase() === lower);
  if (extension) return ofExtension(extension);
  if (kind.schema.toLowerCase() !== lower) return [];
  const extensionAttributes = new Set(kind.extensions.flatMap(ofExtension));
  return kind.attributes.filter((a) => !extensionAttributes.has(a));
}

/**
 * The top-level attribute a name gives ("displayName", or with the URN of a schema of the kind,
 * "urn:ietf:params:scim:schemas:core:2.0:Group:displayName"), case-insensitively; undefined for a name that
 * is no attribute of the kind, or an attribute the URN's schema does not hold.
 */
export function attributeNamed(kind: ResourceKind, name: string): AttributeDefinition | undefined {
  const segments = pathSegments(kind, name);
  return segments.length === 1 ? definitionAt(kind, segments) : undefined;
}

/**
 * An attribute path as clients write it, less any schema URN prefix of the kind
 * ("urn:ietf:params:scim:schemas:core:2.0:User:name.familyName" is "name.familyName").
 */
export function pathSegments(kind: ResourceKind, path: string): string[] {
  const lower = path.toLowerCase();
  for (const urn of [kind.schema, ...kind.extensions]) {
    if (!lower.startsWith(`${urn.toLowerCase()}:`)) continue;
    const segments = path.slice(urn.length + 1).split('.');
    // A URN prefix names an attribute of that schema only; another schema's attribute is left whole, naming nothing.
    const own = attributesOfSchema(kind, urn).some((a) => a.name.toLowerCase() === segments[0].toLowerCase());
    return own ? segments : [path];
  }
  return path.split('.');
}
