// Profile types: friendly names (as Parca's UI shows them) and metric units.

const WELL_KNOWN = {
  'parca_agent:samples:count:cpu:nanoseconds:delta': 'On-CPU',
  'parca_agent_cpu:samples:count:cpu:nanoseconds:delta': 'On-CPU',
  'strata_agent:samples:count:cpu:nanoseconds:delta': 'On-CPU',
  'otel_profiling_agent_on_cpu:samples:count:cpu:nanoseconds:delta': 'On-CPU',
  'parca_agent:wallclock:nanoseconds:samples:count:delta': 'Off-CPU',
  'strata_agent:wallclock:nanoseconds:samples:count:delta': 'Off-CPU',
  'parca_agent:cuda:nanoseconds:cuda:nanoseconds:delta': 'On-GPU',
  'process_cpu:samples:count:cpu:nanoseconds:delta': 'Process CPU Samples',
  'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta': 'Process CPU Nanoseconds',
  'memory:inuse_space:bytes:space:bytes': 'Memory In-Use Bytes',
  'memory:inuse_objects:count:space:bytes': 'Memory In-Use Objects',
  'memory:alloc_space:bytes:space:bytes': 'Memory Allocated Bytes Total',
  'memory:alloc_objects:count:space:bytes': 'Memory Allocated Objects Total',
  'memory:alloc_space:bytes:space:bytes:delta': 'Memory Allocated Bytes Delta',
  'memory:alloc_objects:count:space:bytes:delta': 'Memory Allocated Objects Delta',
  'goroutine:goroutine:count:goroutine:count': 'Goroutine Created Total',
  'block:contentions:count:contentions:count': 'Block Contentions Total',
  'block:delay:nanoseconds:contentions:count': 'Block Contention Time Total',
  'mutex:contentions:count:contentions:count': 'Mutex Contentions Total',
  'mutex:delay:nanoseconds:contentions:count': 'Mutex Contention Time Total',
  'fgprof:samples:count:wallclock:nanoseconds:delta': 'Wallclock Samples',
  'fgprof:time:nanoseconds:wallclock:nanoseconds:delta': 'Wallclock Time',
};

function titleCase(s) {
  return s.replace(/[_-]+/g, ' ').replace(/\b\w/g, (c) => c.toUpperCase());
}

export function parseTypeId(id) {
  const parts = id.split(':');
  if (parts.length < 5) return null;
  return {
    id, name: parts[0], sample_type: parts[1], sample_unit: parts[2],
    period_type: parts[3], period_unit: parts[4], delta: parts[5] === 'delta',
  };
}

export function friendlyName(t) {
  const id = typeof t === 'string' ? t : t.id;
  if (WELL_KNOWN[id]) return WELL_KNOWN[id];
  const p = typeof t === 'string' ? parseTypeId(t) : t;
  if (!p) return id;
  return `${titleCase(p.name)} ${titleCase(p.sample_type)}${p.delta ? '' : ' Total'}`.replace(/\s+/g, ' ');
}

// The unit of the metrics graph's y axis for a series: value_per_second is "cores" for CPU time
// (nanoseconds per second), a rate for other delta types, the sample unit otherwise.
export function metricUnit(series, type) {
  const unit = series?.sample_type?.unit ?? type?.sample_unit ?? '';
  const delta = type ? type.delta : false;
  if (!delta) return { unit, label: unitLabel(unit) };
  if (unit === 'nanoseconds') return { unit: 'cores', label: 'CPU Cores' };
  if (unit === 'bytes') return { unit: 'bytes/s', label: 'Bytes per Second' };
  if (unit === 'count') return { unit: 'count/s', label: 'Per Second' };
  return { unit: `${unit}/s`, label: `${titleCase(unit)} per Second` };
}

function unitLabel(unit) {
  switch (unit) {
    case 'bytes': return 'Bytes';
    case 'nanoseconds': return 'Time';
    case 'count': return 'Count';
    default: return titleCase(unit || 'value');
  }
}

// Parca's default "sum by": delta types by comm, else namespace, else container; none for others.
export function defaultSumBy(type, labelNames) {
  if (!type?.delta) return [];
  for (const l of ['comm', 'namespace', 'container']) if (labelNames.includes(l)) return [l];
  return [];
}
