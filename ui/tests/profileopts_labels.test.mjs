// Unit tests of grouping by labels in src/profileopts.js (node --test tests/profileopts_labels.test.mjs).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import {
  parseGroupBy, groupByShort, GROUP_BY_SHORT, labelGroupOptions, isLabelGroup, groupByLabels, groupByLabelOptions,
  labelNamesRequests, unionNames, nextGroupBy,
} from '../src/profileopts.js';
import { labelFrameKey, packageOf } from '../src/icicle.js';

describe('group by labels', () => {
  it('keeps labels.<name> after the frame fields, once each, the default frame field when none', () => {
    assert.deepEqual(parseGroupBy('labels.endpoint'), ['function_name', 'labels.endpoint']);
    assert.deepEqual(parseGroupBy('labels.region,mapping_file,labels.endpoint,labels.region'),
      ['mapping_file', 'labels.region', 'labels.endpoint']);
    assert.deepEqual(parseGroupBy('labels.,labels.a b,bogus'), ['function_name']);
    assert.deepEqual(parseGroupBy('location_address,bogus'), ['location_address']);
  });
  it('names a label group by its label on the button', () => {
    assert.equal(groupByShort('labels.endpoint'), 'endpoint');
    assert.equal(GROUP_BY_SHORT['labels.endpoint'], 'endpoint');
    assert.equal(GROUP_BY_SHORT.mapping_file, 'binary');
    assert.equal(groupByShort('function_name'), 'function');
  });
  it('offers the Labels API names as menu entries', () => {
    assert.deepEqual(labelGroupOptions(['job', '__name__', 'endpoint', 'job']),
      [['labels.endpoint', 'Label: endpoint'], ['labels.job', 'Label: job']]);
    assert.deepEqual(labelGroupOptions(null), []);
    assert.equal(isLabelGroup('labels.a,b'), false);
  });
  it('offers the labels grouped by too, whether or not the selection lists them', () => {
    assert.deepEqual(groupByLabels('function_name,labels.region,labels.endpoint'), ['region', 'endpoint']);
    assert.deepEqual(groupByLabels(''), []);
    assert.deepEqual(groupByLabelOptions(['endpoint', '__name__'], 'labels.region'),
      [['labels.endpoint', 'Label: endpoint'], ['labels.region', 'Label: region']]);
    assert.deepEqual(groupByLabelOptions(null, null), []);
  });
  it('asks the Labels API once per distinct side, with its selector and time range', () => {
    const a = { query: 't{job="x"}', start: 'now-15m', end: 'now', title: 'A' };
    assert.deepEqual(labelNamesRequests([a]), [{ match: 't{job="x"}', start: 'now-15m', end: 'now' }]);
    assert.deepEqual(labelNamesRequests([a, { ...a, title: 'B' }]), [{ match: 't{job="x"}', start: 'now-15m', end: 'now' }]);
    assert.deepEqual(labelNamesRequests([a, { query: 't{job="y"}', start: '1', end: '2' }]).map((r) => r.match),
      ['t{job="x"}', 't{job="y"}']);
    assert.deepEqual(labelNamesRequests([null, { query: '' }]), []);
    assert.deepEqual(unionNames([['job', 'endpoint'], ['version', 'job', ''], []]), ['endpoint', 'job', 'version']);
  });
  it('keeps the labels grouped by when the frame checkboxes change', () => {
    const offered = ['function_name', 'function_file_name', 'location_address', 'mapping_file', 'labels.endpoint', 'labels.job'];
    // A frame field added: the label stays, after the frame fields.
    assert.equal(nextGroupBy('function_name,labels.endpoint', ['function_name', 'function_file_name', 'labels.endpoint'], offered),
      'function_name,function_file_name,labels.endpoint');
    // A label the menu does not list (not in this selection) stays too.
    assert.equal(nextGroupBy('function_name,labels.region', ['function_name', 'mapping_file'], offered),
      'function_name,mapping_file,labels.region');
    // Labels keep their order; a newly checked one goes last; an unchecked one goes.
    assert.equal(nextGroupBy('labels.job,labels.endpoint', ['function_name', 'labels.endpoint', 'labels.job'], offered),
      'function_name,labels.job,labels.endpoint');
    assert.equal(nextGroupBy('labels.job', ['function_name', 'labels.endpoint', 'labels.job'], offered),
      'function_name,labels.job,labels.endpoint');
    assert.equal(nextGroupBy('function_name,labels.endpoint', ['function_name'], offered), 'function_name');
    // No frame field checked: the default one, labels kept.
    assert.equal(nextGroupBy('function_name,labels.endpoint', ['labels.endpoint'], offered), 'function_name,labels.endpoint');
    assert.equal(nextGroupBy(null, [], offered), 'function_name');
  });
  it('colours label frames by their label names, not by what their values look like', () => {
    assert.equal(labelFrameKey('endpoint="/a"'), 'endpoint=');
    assert.equal(labelFrameKey('endpoint="/api/v1.2/x"'), 'endpoint=');
    assert.equal(labelFrameKey('endpoint="/b", region="eu"'), 'endpoint=,region=');
    assert.equal(labelFrameKey('main.main'), '');
    assert.equal(labelFrameKey('net/http.(*conn).serve'), '');
    assert.equal(labelFrameKey(''), '');
    assert.equal(packageOf('main.main'), 'main');
  });
});
