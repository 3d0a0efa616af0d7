// @peculiar/x509 resolves its parts through tsyringe, which needs the Reflect metadata API loaded first;
// importing the library through this module guarantees the order, and sets Node's Web Crypto as its provider.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { webcrypto } from 'node:crypto';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

export { x509 };
