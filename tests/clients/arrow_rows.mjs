// The rows of an Arrow IPC stream as npm's apache-arrow reads them, for the tests: field
// "name:type" strings, and each row's values with binary decoded as UTF-8 and 64-bit integers as
// decimal text (JSON has no 64-bit integers). Shared by grpcweb_client.mjs and arrow_dump.mjs.
import { tableFromIPC } from 'apache-arrow';

export function arrowRows(record) {
  const table = tableFromIPC(record);
  const text = (v) => (v instanceof Uint8Array ? Buffer.from(v).toString('utf8') : v);
  return {
    fields: table.schema.fields.map((f) => `${f.name}:${f.type}`),
    rows: [...table].map((row) => {
      const out = {};
      for (const [k, v] of Object.entries(row.toJSON())) {
        if (typeof v === 'bigint') out[k] = v.toString();
        else if (v && typeof v.toArray === 'function') out[k] = [...v.toArray()].map((x) => (typeof x === 'bigint' ? x.toString() : x));
        else out[k] = text(v);
      }
      return out;
    }),
  };
}

