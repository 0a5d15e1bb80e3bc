// xjax.hpp: the umbrella header. `namespace xj = xjax;` in user code.
#pragma once
#include "xjax/array.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/dtype.hpp"
#include "xjax/errors.hpp"
#include "xjax/jaxpr.hpp"
#include "xjax/ops.hpp"
#include "xjax/primitives.hpp"
#include "xjax/pytree.hpp"
#include "xjax/runtime.hpp"
#include "xjax/testing.hpp"
#include "xjax/transforms.hpp"
