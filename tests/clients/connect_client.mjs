// A Connect client (npm's @connectrpc/connect over @connectrpc/connect-node, HTTP/1.1) asks
// Strata's HTTP port the questions tests/integration/test_npm_clients.py also asks with grpcio,
// with the JSON codec (connect-web's default) and the binary one. The service comes from a
// FileDescriptorSet that protoc made of Strata's own query.proto (connect-es builds clients from
// descriptors). Prints one JSON line per call: the answer encoded again as binary (base64), or the
// error's code and message.
//
//   node connect_client.mjs <descriptor set file> <http base URL> <tenant> <start s> <end s>
import { readFileSync } from 'node:fs';
import { create, createFileRegistry, fromBinary, toBinary } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';

const [setPath, base, tenant, startS, endS] = process.argv.slice(2);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(setPath)));
const service = registry.getService('parca.query.v1alpha1.QueryService');
const query = 'process_cpu:samples:count:cpu:nanoseconds:delta{}';
const range = { start: { seconds: BigInt(startS) }, end: { seconds: BigInt(endS) } };

async function ask(format, client, name, method, request) {
  const m = service.methods.find((x) => x.name === method);
  try {
    const response = await client[m.localName](create(m.input, request), { headers: { 'x-scope-orgid': tenant } });
    console.log(JSON.stringify({ format, name, ok: true, b64: Buffer.from(toBinary(m.output, response)).toString('base64') }));
  } catch (e) {
    const err = ConnectError.from(e);
    console.log(JSON.stringify({ format, name, ok: false, code: Code[err.code], message: err.rawMessage }));
  }
}

for (const format of ['connect-json', 'connect-binary']) {
  const transport = createConnectTransport({ baseUrl: base, httpVersion: '1.1', useBinaryFormat: format === 'connect-binary' });
  const client = createClient(service, transport);
  await ask(format, client, 'ProfileTypes', 'ProfileTypes', {});
  await ask(format, client, 'Labels', 'Labels', {});
  await ask(format, client, 'Values', 'Values', { labelName: 'job' });
  await ask(format, client, 'QueryRange', 'QueryRange', { query, ...range, sumBy: ['job'] });
  const enumValue = (name, value) => registry.getEnum(name).values.find((v) => v.name === value).number;
  const mode = enumValue('parca.query.v1alpha1.QueryRequest.Mode', 'MODE_MERGE');
  for (const report of ['FLAMEGRAPH_TABLE', 'TOP', 'PPROF', 'CALLGRAPH']) {
    const reportType = enumValue('parca.query.v1alpha1.QueryRequest.ReportType', `REPORT_TYPE_${report}`);
    await ask(format, client, `Query/${report}`, 'Query', {
      mode, reportType, options: { case: 'merge', value: { query, ...range } },
    });
  }
  await ask(format, client, 'HasProfileData', 'HasProfileData', {});
  await ask(format, client, 'QueryRange/bad', 'QueryRange', { query: 'not a selector{', ...range });
}
