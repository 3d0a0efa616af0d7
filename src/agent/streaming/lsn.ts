/** PostgreSQL log sequence numbers (`16/B374D848`): compared as numbers, named in files as 16 hex digits that sort. */

export function lsnToBigInt(lsn: string): bigint {
  const [high, low] = lsn.split('/');
  if (high === undefined || low === undefined || !/^[0-9A-Fa-f]{1,8}$/.test(high) || !/^[0-9A-Fa-f]{1,8}$/.test(low)) {
    throw new Error(`not a log sequence number: ${lsn}`);
  }
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
}

export function bigIntToLsn(value: bigint): string {
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** The LSN as 16 upper-case hex digits: file names that sort in log order. */
export function lsnKey(lsn: string): string {
  return lsnToBigInt(lsn).toString(16).toUpperCase().padStart(16, '0');
}

export function compareLsn(a: string, b: string): number {
  const x = lsnToBigInt(a);
  const y = lsnToBigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}
