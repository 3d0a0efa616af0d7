export interface DirectoryTokenTable {
  id: string;
  accountId: string;
  name: string;
  /** SHA-256 of the token's random secret (256 bits, so a fast hash suffices); the secret itself is never kept. */
  secretHash: string;
  createdAt: string;
  /** Set when an admin revokes the token: it stops working at once. */
  revokedAt: string | null;
}

/** A SCIM User; the whole resource as the directory sent it is `document`, less password, id and meta. */
export interface ScimUserTable {
  id: string;
  accountId: string;
  userName: string;
  /** userName in lower case: unique per account, since userName is not case-exact. */
  userNameKey: string;
  /** displayName, kept apart to show members without reading their documents. */
  displayName: string | null;
  document: string;
  /** scrypt hash of the password the directory set, or null; never answered. */
  passwordHash: string | null;
  version: number;
  createdAt: string;
  lastModified: string;
}

/** A SCIM Group; its members live in scimGroupMembers, never in `document`. */
export interface ScimGroupTable {
  id: string;
  accountId: string;
  displayName: string;
  document: string;
  /** The project whose role the group grants its members (with `role`), or null. */
  projectId: string | null;
  role: string | null;
  version: number;
  createdAt: string;
  lastModified: string;
}

export interface ScimGroupMemberTable {
  groupId: string;
  userId: string;
}

/**
 * One row per leaf value of a resource (attribute path in lower case, which element of a multi-valued
 * attribute it belongs to, the value as compared): filters compile to SQL over it instead of loading resources.
 */
export interface ScimValueTable {
  resourceId: string;
  accountId: string;
  resourceType: string;
  attribute: string;
  element: number;
  value: string;
}

export interface ScimTables {
  directoryTokens: DirectoryTokenTable;
  scimUsers: ScimUserTable;
  scimGroups: ScimGroupTable;
  scimGroupMembers: ScimGroupMemberTable;
  scimValues: ScimValueTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ScimTables {}
}
