// Node ESM hooks for @parca/client, whose dist/ is ES modules with extensionless relative
// imports and no "type": "module" (it is written for bundlers): add ".js" where a relative import
// has none, and load its files as modules.
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (e) {
    if (specifier.startsWith('.') && !specifier.endsWith('.js')) return next(`${specifier}.js`, context);
    throw e;
  }
}

export async function load(url, context, next) {
  if (url.includes('/node_modules/@parca/client/dist/')) return next(url, { ...context, format: 'module' });
  return next(url, context);
}
