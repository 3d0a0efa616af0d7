/**
 * A bucket of an S3-compatible store, through @aws-sdk/client-s3. The endpoint is the agent's object store
 * setting (`http(s)://host:port` for an S3-compatible service, path-style; `s3://` for AWS itself);
 * credentials and region come from the SDK's usual chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a
 * profile, an instance or task role; AWS_REGION, else us-east-1), never from the server.
 */
import { DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';

/** An ObjectStore (object-store.ts, which loads this module when asked for S3). */
export class S3Store {
  private readonly client: S3Client;

  constructor(
    readonly bucket: string,
    readonly endpoint: string | undefined,
  ) {
    this.client = new S3Client({
      region: process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || 'us-east-1',
      ...(endpoint && { endpoint, forcePathStyle: true }),
    });
  }

  async put(key: string, body: string | Uint8Array, contentType = 'application/x-ndjson'): Promise<void> {
    await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, ContentType: contentType }));
  }

  async list(folder: string): Promise<string[]> {
    const names: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: folder, Delimiter: '/', ContinuationToken: token }),
      );
      for (const object of page.Contents ?? []) if (object.Key) names.push(object.Key.slice(folder.length));
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return names;
  }

  async remove(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
  }

  describe(): string {
    return `s3 bucket ${this.bucket}${this.endpoint ? ` at ${this.endpoint}` : ''}`;
  }
}
