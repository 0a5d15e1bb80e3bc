// The umbrella header alone.
#include <xjax/xjax.hpp>
int main() { return 0; }
