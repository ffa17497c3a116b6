// Reads base64 Arrow IPC streams, one per line on stdin, and prints each one's rows as a JSON
// line (arrow_rows.mjs): how Python tests decode Strata's Arrow reports with apache-arrow.
//
//   echo <base64> | node arrow_dump.mjs
import { createInterface } from 'node:readline';
import { arrowRows } from './arrow_rows.mjs';

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === '') continue;
  console.log(JSON.stringify(arrowRows(Buffer.from(line.trim(), 'base64'))));
}
