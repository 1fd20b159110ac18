package validate

import (
	"testing"
	"unsafe"
)

type nilMethods struct{}

func (*nilMethods) Do() {}

func TestIsNil(t *testing.T) {
	t.Parallel()
	var (
		ptr   *nilMethods
		iface interface{ Do() } = ptr
		m     map[string]int
		sl    []int
		ch    chan int
		fn    func()
		up    unsafe.Pointer
	)
	for name, v := range map[string]any{"nil": nil, "pointer": ptr, "interface holding a nil pointer": iface,
		"map": m, "slice": sl, "chan": ch, "func": fn, "unsafe.Pointer": up} {
		if !IsNil(v) {
			t.Errorf("IsNil(%s) = false, want true", name)
		}
	}
	for name, v := range map[string]any{"pointer": &nilMethods{}, "struct": nilMethods{}, "zero int": 0, "empty string": "",
		"empty map": map[string]int{}, "func": func() {}} {
		if IsNil(v) {
			t.Errorf("IsNil(%s) = true, want false", name)
		}
	}
}
