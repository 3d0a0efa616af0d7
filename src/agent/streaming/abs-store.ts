/**
 * A container of an Azure Blob Storage account, through @azure/storage-blob with the account's shared key
 * (the `abs` target's `accountKey`, read from the agent's vault). The endpoint is Azure's
 * (`https://<account>.blob.core.windows.net`) unless the agent is given another (`--blob-endpoint`,
 * DPC_AGENT_BLOB_ENDPOINT, `{account}` standing for the account name: e.g. Azurite's
 * `http://127.0.0.1:10000/{account}`). Each put is one whole block blob upload: a reader sees it whole or not at all.
 */
import { BlobServiceClient, StorageSharedKeyCredential, type ContainerClient } from '@azure/storage-blob';
import type { ObjectStore } from './object-store.ts';

export const AZURE_BLOB_ENDPOINT = 'https://{account}.blob.core.windows.net';

export class AzureBlobStore implements ObjectStore {
  private readonly container: ContainerClient;
  private readonly url: string;

  constructor(options: { accountName: string; accountKey: string; container: string; endpoint?: string }) {
    this.url = (options.endpoint || AZURE_BLOB_ENDPOINT).replaceAll('{account}', options.accountName).replace(/\/+$/, '');
    const credential = new StorageSharedKeyCredential(options.accountName, options.accountKey);
    this.container = new BlobServiceClient(this.url, credential).getContainerClient(options.container);
  }

  async put(key: string, body: string | Uint8Array, contentType = 'application/x-ndjson'): Promise<void> {
    await this.container
      .getBlockBlobClient(key)
      .upload(body, Buffer.byteLength(body), { blobHTTPHeaders: { blobContentType: contentType } });
  }

  async list(folder: string): Promise<string[]> {
    const names: string[] = [];
    for await (const item of this.container.listBlobsByHierarchy('/', { prefix: folder })) {
      if (item.kind === 'blob') names.push(item.name.slice(folder.length));
    }
    return names;
  }

  async remove(key: string): Promise<void> {
    await this.container.deleteBlob(key).catch((error: { statusCode?: number }) => {
      if (error.statusCode !== 404) throw error;
    });
  }

  describe(): string {
    return `azure blob container ${this.container.containerName} at ${this.url}`;
  }
}
